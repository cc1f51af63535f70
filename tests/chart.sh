#!/usr/bin/env bash
# Chart tests for charts/fleetnet-hub and charts/fleetnet-hub-member, with a real helm binary
# (built once from its Go module by tests/testenv/install.sh helm).
#
#   - helm lint --strict of both charts, the hub chart once per value set in charts/fleetnet-hub/ci/;
#   - the shared RBAC rule files: files/hub-member-role.yaml is one plain Role, files/
#     member-clusterrole.yaml one plain ClusterRole, files/member-fleet-system-role.yaml one plain
#     Role, and the member chart's copies are identical;
#   - charts/fleetnet-hub-member.yaml (the `kubectl apply` manifest) matches a fresh rendering;
#   - helm template of the hub chart with each value set, and assertions on the objects
#     (a python3 + PyYAML checker below);
#   - value sets that must be refused (schema or template checks);
#   - the monitoring objects (ServiceMonitor, PrometheusRule, Grafana dashboard ConfigMap) rendered with
#     their values on (block "monitoring" below; tests/e2e/operating proves them with real tools).
#   - the NetworkPolicy (health and metrics ports only, scrapers from networkPolicy.metrics.from,
#     egress open) in every value set that keeps it on;
#   - every rendering parsed strictly: a duplicated mapping key fails (PyYAML, like Kubernetes,
#     would keep the last one silently).
#
# The renderings are written to $FLEETNET_CHART_OUT (default: a temporary directory, removed at exit):
#   <set>.yaml for each value set (release "fleetnet-hub" in namespace "fleetnet-system", without CRDs),
#   three-members.yaml being the one meant to be applied to a real apiserver, and
#   fleetnet-hub-member.yaml (the member manifest).
# FLEETNET_CHART_UPDATE=1 rewrites charts/fleetnet-hub-member.yaml and the values reference of
# charts/fleetnet-hub/README.md (generated from values.schema.json) instead of comparing them.
# FLEETNET_HELM=/path/to/helm uses that helm instead of building v4 (tests/testenv/versions.env).
# FLEETNET_HUB_BIN=/path/to/fleetnet-hub: the binary whose `run --help` lists the flags the chart may
# pass (default: `cargo run`); tests/e2e/chart.rs passes the one cargo built for the test.
#
# Last line: `chart: N passed, M failed`; the exit code is non-zero when anything failed.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
hub_chart="$root/charts/fleetnet-hub"
member_chart="$root/charts/fleetnet-hub-member"
member_manifest="$root/charts/fleetnet-hub-member.yaml"
release=fleetnet-hub
release_ns=fleetnet-system
# Render for the Kubernetes version the test apiserver runs (tests/testenv/versions.env), not for
# whatever default the helm binary was built with.
# shellcheck disable=SC1091
source "$root/tests/testenv/versions.env"
kube_version="$KUBERNETES_VERSION"

passed=0
failed=0
pass() { passed=$((passed + 1)); echo "ok   - $*"; }
fail() { failed=$((failed + 1)); echo "FAIL - $*"; }
summary() { echo "chart: $passed passed, $failed failed"; }

tmp="$(mktemp -d)"
if [ -n "${FLEETNET_CHART_OUT:-}" ]; then
  out="$FLEETNET_CHART_OUT"
  mkdir -p "$out"
else
  out="$tmp/out"
  mkdir -p "$out"
fi
trap 'rm -rf "$tmp"' EXIT

# --- tools -------------------------------------------------------------------------------------------
# FLEETNET_HELM=/path/to/helm runs the same checks with another helm (e.g. a Helm 3 build).
if [ -n "${FLEETNET_HELM:-}" ]; then
  HELM="$FLEETNET_HELM"
else
  helm_dir="$(bash "$root/tests/testenv/install.sh" helm | tail -n 1)"
  HELM="$helm_dir/helm"
fi
if ! "$HELM" version >/dev/null 2>&1; then
  fail "helm binary at $HELM does not run"
  summary
  exit 1
fi
echo "# helm: $("$HELM" version --short 2>/dev/null || true) ($HELM)"

PY="${PYTHON:-python3}"
if ! "$PY" -c 'import yaml' 2>/dev/null; then
  echo "# PyYAML missing for $PY; installing it from PyPI" >&2
  "$PY" -m pip install --quiet pyyaml >&2 || true
fi
if ! "$PY" -c 'import yaml' 2>/dev/null; then
  fail "python3 with PyYAML is needed for the rendered-manifest checks (pip install pyyaml)"
  summary
  exit 1
fi

# The `fleetnet-hub run` flags, from the binary itself: a chart flag it does not know is a typo.
if [ -n "${FLEETNET_HUB_BIN:-}" ]; then
  "$FLEETNET_HUB_BIN" run --help >"$tmp/run-help.txt"
else
  (cd "$root" && cargo run -q --bin fleetnet-hub -- run --help) >"$tmp/run-help.txt"
fi

# Runs a command quietly; on failure shows its output.
run_check() {
  local desc="$1"; shift
  if "$@" >"$tmp/check.log" 2>&1; then
    pass "$desc"
  else
    fail "$desc"
    sed 's/^/       | /' "$tmp/check.log" | head -n 40
  fi
}

# --- the checker --------------------------------------------------------------------------------------
cat >"$tmp/check.py" <<'PY'
"""Assertions on one `helm template` rendering of charts/fleetnet-hub. Prints `ok`/`FAIL` lines."""
import re
import sys
import yaml

set_name, path, hub_role_path, release_ns, release, run_help = sys.argv[1:7]
docs = [d for d in yaml.safe_load_all(open(path)) if d]
hub_role = yaml.safe_load(open(hub_role_path))

# The `fleetnet-hub run` flags (its --help): `--name <VALUE>` takes a value, `--name` alone is a bool.
help_flags = re.findall(r"^\s+(?:-\w, )?(--[a-z0-9-]+)( <[A-Z_]+>)?$", open(run_help).read(), re.M)
KNOWN_FLAGS = {name for name, _ in help_flags}
BOOL_FLAGS = {name for name, value in help_flags if not value}
if len(KNOWN_FLAGS) < 20 or "--leader-elect" not in BOOL_FLAGS:
    print(f"FAIL - the flags of `fleetnet-hub run --help` could not be read: {sorted(KNOWN_FLAGS)}")
    sys.exit(1)

EXPECT = {
    "defaults": dict(members=[], replicas=2, leader=True, service_monitor=False, otlp=False,
                     credential=None, namespaces=False, secrets=[]),
    "three-members": dict(members=["member-1", "member-2", "member-3"], replicas=2, leader=True,
                          service_monitor=False, otlp=False, credential=None, namespaces=True,
                          secrets=["fleetnet-member-kubeconfigs"],
                          member_config={"member-2": {"azureSubscriptionId": "00000000-0000-0000-0000-000000000000",
                                                      "azureResourceGroup": "rg-member-2",
                                                      "traceSamplingRatio": 0.5}}),
    "monitoring-otlp": dict(members=["member-1", "member-2", "member-3"], replicas=2, leader=True,
                            service_monitor=True, otlp=True, credential=None, namespaces=False,
                            secrets=["fleetnet-member-kubeconfigs", "fleetnet-member-kubeconfigs-extra"],
                            metrics_from=[{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "observability"}},
                                           "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}}}]),
    "traffic-manager-workload-identity": dict(members=["member-1", "member-2"], replicas=2, leader=True,
                                              service_monitor=False, otlp=False,
                                              credential="workload-identity", namespaces=False,
                                              secrets=["fleetnet-member-kubeconfigs"]),
    "client-secret": dict(members=["member-1"], replicas=2, leader=True, service_monitor=False,
                          otlp=False, credential="client-secret", namespaces=False,
                          secrets=["fleetnet-member-kubeconfigs"]),
    "sharded": dict(members=["member-1", "member-2", "member-3"], replicas=3, leader=True, shard=True, cleanup=True,
                    service_monitor=False, otlp=False, credential=None, namespaces=False,
                    secrets=["fleetnet-member-kubeconfigs"]),
    "single-replica": dict(members=["member-1"], replicas=1, leader=False, service_monitor=False,
                           otlp=False, credential=None, namespaces=False,
                           secrets=["fleetnet-member-kubeconfigs"], pdb=False,
                           trust=True, events=("5", "10"), concurrency="4", netpol=False),
}
exp = EXPECT[set_name]

results = []


def check(desc, cond, detail=""):
    results.append((bool(cond), desc, detail))


def of_kind(kind):
    return [d for d in docs if d.get("kind") == kind]


def one(kind):
    found = of_kind(kind)
    check(f"exactly one {kind}", len(found) == 1, f"found {len(found)}")
    return found[0] if found else {}


def env_map(container):
    return {e["name"]: e for e in container.get("env", [])}


deploy = one("Deployment")
pod = deploy.get("spec", {}).get("template", {})
pod_spec = pod.get("spec", {})
pod_labels = pod.get("metadata", {}).get("labels", {})
containers = pod_spec.get("containers", [])
check("one container", len(containers) == 1)
c = containers[0] if containers else {}
args = c.get("args", [])
flags = {}
for a in args[1:]:
    name, _, value = a.partition("=")
    flags.setdefault(name, []).append(value if _ else None)

# --- Deployment basics
check("Deployment in the release namespace", deploy.get("metadata", {}).get("namespace") == release_ns)
check(f"replicas == {exp['replicas']}", deploy.get("spec", {}).get("replicas") == exp["replicas"])
check("args start with the `run` subcommand", args[:1] == ["run"], args[:1])
unknown = sorted(f for f in flags if f not in KNOWN_FLAGS)
check("every arg is a known `fleetnet-hub run` flag", not unknown, unknown)
check("every flag given at most once", all(len(v) == 1 for v in flags.values()),
      {k: v for k, v in flags.items() if len(v) > 1})
check("bool flags carry no value", all(flags[f] == [None] for f in BOOL_FLAGS if f in flags))
check("value flags carry a value", all(v != [None] for f, v in flags.items() if f not in BOOL_FLAGS))
check("--hub-kubeconfig unset (in-cluster config)", "--hub-kubeconfig" not in flags)
check("--hub-namespace-prefix=fleet-member-", flags.get("--hub-namespace-prefix") == ["fleet-member-"])
if exp.get("shard"):
    check("args contain --shard-members, not --leader-elect",
          "--shard-members" in args and "--leader-elect" not in args)
    check("--shards=24 (the default)", flags.get("--shards") == ["24"], flags.get("--shards"))
check("--cleanup-on-remove exactly with cleanupOnRemove",
      ("--cleanup-on-remove" in args) == bool(exp.get("cleanup")))
if exp["leader"]:
    check("args contain --leader-elect or --shard-members",
          ("--leader-elect" in args) != bool(exp.get("shard")))
    check("--leader-election-namespace is the release namespace",
          flags.get("--leader-election-namespace") == [release_ns])
    check("--leader-election-id is the release fullname", flags.get("--leader-election-id") == [release])
else:
    check("args lack --leader-elect", "--leader-elect" not in flags)
    check("no --leader-election-namespace without leader election", "--leader-election-namespace" not in flags)

# --- member trust and budgets
trust = exp.get("trust", False)
for flag in ("--allow-member-exec-plugins", "--allow-insecure-member-tls", "--allow-member-proxy"):
    check(f"{flag} {'on' if trust else 'off'}", flags.get(flag) == [None] if trust else flag not in flags)
eq, eb = exp.get("events", ("10", "25"))
check("--event-qps / --event-burst from values",
      (flags.get("--event-qps"), flags.get("--event-burst")) == ([eq], [eb]),
      (flags.get("--event-qps"), flags.get("--event-burst")))
check("quotas from values",
      (flags.get("--max-exports-per-member"), flags.get("--max-export-bytes"))
      == ([exp.get("max_exports", "1000")], [exp.get("max_export_bytes", "65536")]),
      (flags.get("--max-exports-per-member"), flags.get("--max-export-bytes")))
check("--reconcile-concurrency from values",
      flags.get("--reconcile-concurrency") == [exp.get("concurrency", "16")], flags.get("--reconcile-concurrency"))

# --- ports and probes
ports = {p["name"]: p["containerPort"] for p in c.get("ports", [])}
check("metrics and health container ports", {"metrics", "health"} <= set(ports), ports)
check("--metrics-bind-address matches the metrics port",
      flags.get("--metrics-bind-address") == [f"0.0.0.0:{ports.get('metrics')}"])
check("--health-probe-bind-address matches the health port",
      flags.get("--health-probe-bind-address") == [f"0.0.0.0:{ports.get('health')}"])
live = c.get("livenessProbe", {}).get("httpGet", {})
ready = c.get("readinessProbe", {}).get("httpGet", {})
check("liveness probe GET /healthz on the health port", live.get("path") == "/healthz" and live.get("port") in ("health", ports.get("health")))
check("readiness probe GET /readyz on the health port", ready.get("path") == "/readyz" and ready.get("port") in ("health", ports.get("health")))
check("resources requests and limits set", c.get("resources", {}).get("requests") and c.get("resources", {}).get("limits"))

# --- security context
sc = c.get("securityContext", {})
psc = pod_spec.get("securityContext", {})
check("securityContext.runAsNonRoot", sc.get("runAsNonRoot") is True or psc.get("runAsNonRoot") is True)
check("securityContext.readOnlyRootFilesystem", sc.get("readOnlyRootFilesystem") is True)
check("securityContext.allowPrivilegeEscalation false", sc.get("allowPrivilegeEscalation") is False)
check("securityContext.capabilities.drop [ALL]", sc.get("capabilities", {}).get("drop") == ["ALL"])
check("seccompProfile RuntimeDefault",
      (sc.get("seccompProfile") or psc.get("seccompProfile") or {}).get("type") == "RuntimeDefault")
check("runs as uid 65532", (sc.get("runAsUser") or psc.get("runAsUser")) == 65532)

# --- volumes: kubeconfig dir and member config
mounts = {m["name"]: m for m in c.get("volumeMounts", [])}
volumes = {v["name"]: v for v in pod_spec.get("volumes", [])}
check("no subPath on any volume mount", all("subPath" not in m and "subPathExpr" not in m for m in mounts.values()))
kdir = (flags.get("--kubeconfig-dir") or [None])[0]
kmount = [m for m in mounts.values() if m.get("mountPath") == kdir]
check("a volume is mounted read-only at --kubeconfig-dir", len(kmount) == 1 and kmount[0].get("readOnly") is True, kdir)
kvol = volumes.get(kmount[0]["name"], {}) if kmount else {}
if exp["secrets"]:
    sources = kvol.get("projected", {}).get("sources", [])
    names = [s.get("secret", {}).get("name") for s in sources]
    check("kubeconfig dir is a projected volume of the memberKubeconfigSecrets", names == exp["secrets"], names)
else:
    check("kubeconfig dir is an emptyDir without memberKubeconfigSecrets", "emptyDir" in kvol, kvol)
mc = (flags.get("--member-config") or [""])[0]
mc_dir, _, mc_file = mc.rpartition("/")
mc_mount = [m for m in mounts.values() if m.get("mountPath") == mc_dir]
check("--member-config lies in a mounted directory", len(mc_mount) == 1, mc)
cms = {d["metadata"]["name"]: d for d in of_kind("ConfigMap")}
cm_name = volumes.get(mc_mount[0]["name"], {}).get("configMap", {}).get("name") if mc_mount else None
cm = cms.get(cm_name, {})
check("member-config ConfigMap rendered with the file's key", mc_file in cm.get("data", {}), cm_name)
member_config = yaml.safe_load(cm.get("data", {}).get(mc_file, "") or "{}") or {}
check("member-config file is `members: {...}`", isinstance(member_config.get("members"), dict), member_config)
check("member-config content", member_config.get("members") == exp.get("member_config", {}), member_config)

# --- env: OTLP, Azure secret
env = env_map(c)
check("RUST_LOG set", "RUST_LOG" in env)
if exp["otlp"]:
    check("OTEL_EXPORTER_OTLP_ENDPOINT", env.get("OTEL_EXPORTER_OTLP_ENDPOINT", {}).get("value") == "http://otel-collector.observability:4318")
    check("OTEL_EXPORTER_OTLP_PROTOCOL", env.get("OTEL_EXPORTER_OTLP_PROTOCOL", {}).get("value") == "http/protobuf")
    check("OTEL_SERVICE_NAME", env.get("OTEL_SERVICE_NAME", {}).get("value") == "fleetnet-hub-prod")
    check("OTEL_RESOURCE_ATTRIBUTES (sorted k=v)", env.get("OTEL_RESOURCE_ATTRIBUTES", {}).get("value") == "deployment.environment=prod,k8s.cluster.name=hub-1")
    check("--trace-sampling-ratio from values", flags.get("--trace-sampling-ratio") == ["0.25"])
    check("--log-format=text", flags.get("--log-format") == ["text"])
    check("FLEETNET_OTLP_ALLOW_HTTP for the plain-http collector",
          env.get("FLEETNET_OTLP_ALLOW_HTTP", {}).get("value") == "true")
    ca = env.get("OTEL_EXPORTER_OTLP_CERTIFICATE", {}).get("value", "")
    ca_dir, _, ca_file = ca.rpartition("/")
    ca_mount = [m for m in mounts.values() if m.get("mountPath") == ca_dir]
    check("OTEL_EXPORTER_OTLP_CERTIFICATE names the caSecret key in a read-only mount",
          ca_file == "ca.pem" and len(ca_mount) == 1 and ca_mount[0].get("readOnly") is True, ca)
    ca_vol = volumes.get(ca_mount[0]["name"], {}) if ca_mount else {}
    check("that mount is the caSecret", ca_vol.get("secret", {}).get("secretName") == "otel-collector-ca", ca_vol)
else:
    check("no OTLP endpoint by default (tracing off)", "OTEL_EXPORTER_OTLP_ENDPOINT" not in env)
    check("no OTLP CA and no plain-http opt-in by default",
          "OTEL_EXPORTER_OTLP_CERTIFICATE" not in env and "FLEETNET_OTLP_ALLOW_HTTP" not in env)
check("no secret value inline in env", all("value" not in e for n, e in env.items() if "SECRET" in n or "TOKEN" in n))
check("no secret in args", not any("secret" in a.lower() and "--azure-credential=client-secret" != a
                                   and not a.startswith("--member-secrets") for a in args))
# Members from labelled Secrets (controller.memberSecrets, on in every value set): read in the
# release namespace, where the Role below lets the controller list and watch Secrets.
check("--member-secrets-namespace is the release namespace",
      flags.get("--member-secrets-namespace") == [release_ns], flags.get("--member-secrets-namespace"))

cred = exp["credential"]
sas = of_kind("ServiceAccount")
sa = sas[0] if sas else {}
sa_ann = sa.get("metadata", {}).get("annotations") or {}
check("pod uses the chart's ServiceAccount", pod_spec.get("serviceAccountName") == sa.get("metadata", {}).get("name"))
if cred is None:
    check("no --azure-* flags without a credential", not any(f.startswith("--azure-") for f in flags))
    check("no --enable-traffic-manager", "--enable-traffic-manager" not in flags)
    check("no workload-identity pod label", "azure.workload.identity/use" not in pod_labels)
else:
    check("--enable-traffic-manager", flags.get("--enable-traffic-manager") == [None])
    check(f"--azure-credential={cred}", flags.get("--azure-credential") == [cred])
    for f in ("--azure-tenant-id", "--azure-client-id", "--azure-subscription-id", "--azure-resource-group",
              "--azure-arm-endpoint", "--azure-authority-host"):
        check(f"{f} set", flags.get(f, [None])[0])
if cred == "workload-identity":
    check("workload-identity pod label", pod_labels.get("azure.workload.identity/use") == "true")
    check("ServiceAccount annotation azure.workload.identity/client-id",
          sa_ann.get("azure.workload.identity/client-id") == "22222222-2222-2222-2222-222222222222")
    check("ARM endpoint of the public cloud", flags.get("--azure-arm-endpoint") == ["https://management.azure.com"])
    check("no AZURE_CLIENT_SECRET with workload identity", "AZURE_CLIENT_SECRET" not in env)
if cred == "client-secret":
    ref = env.get("AZURE_CLIENT_SECRET", {}).get("valueFrom", {}).get("secretKeyRef", {})
    check("AZURE_CLIENT_SECRET from the existing Secret", ref == {"name": "fleetnet-hub-azure", "key": "client-secret"}, ref)
    check("no workload-identity pod label with client-secret", "azure.workload.identity/use" not in pod_labels)
    check("US Government cloud endpoints",
          flags.get("--azure-arm-endpoint") == ["https://management.usgovcloudapi.net"]
          and flags.get("--azure-authority-host") == ["https://login.microsoftonline.us"])

# --- RBAC
sa_subject = {"kind": "ServiceAccount", "name": sa.get("metadata", {}).get("name"), "namespace": release_ns}
# Cluster-scoped: only list + watch of the five hub kinds the jobs read (each replica's one watch
# per kind, src/controller/hub_tap.rs; tests/e2e/rbac proves the use from the audit log).
reader = f"{release}-hub-reader"
hub_reads = [
    {"apiGroups": ["networking.fleet.azure.com"],
     "resources": ["internalserviceexports", "endpointsliceexports", "internalserviceimports", "endpointsliceimports"],
     "verbs": ["list", "watch"]},
    {"apiGroups": ["cluster.kubernetes-fleet.io"], "resources": ["internalmemberclusters"], "verbs": ["list", "watch"]},
]
check("one ClusterRole: the hub reader", [d["metadata"]["name"] for d in of_kind("ClusterRole")] == [reader],
      [d["metadata"]["name"] for d in of_kind("ClusterRole")])
check("the hub reader lists and watches the five hub kinds, nothing else",
      all(d.get("rules") == hub_reads for d in of_kind("ClusterRole")), [d.get("rules") for d in of_kind("ClusterRole")])
check("one ClusterRoleBinding, of the hub reader",
      [(d["metadata"]["name"], d.get("roleRef", {}).get("name")) for d in of_kind("ClusterRoleBinding")] == [(reader, reader)],
      [d["metadata"]["name"] for d in of_kind("ClusterRoleBinding")])
for rb in of_kind("ClusterRoleBinding") + of_kind("RoleBinding"):
    check(f"{rb['kind']} {rb['metadata']['name']} binds only the chart's ServiceAccount", rb.get("subjects") == [sa_subject], rb.get("subjects"))
roles = {(r["metadata"].get("namespace"), r["metadata"]["name"]): r for r in of_kind("Role")}
croles = {r["metadata"]["name"] for r in of_kind("ClusterRole")}
for rb in of_kind("RoleBinding"):
    ref = rb["roleRef"]
    check(f"RoleBinding {rb['metadata']['namespace']}/{rb['metadata']['name']} refers to a rendered Role",
          ref["kind"] == "Role" and (rb["metadata"]["namespace"], ref["name"]) in roles)
for crb in of_kind("ClusterRoleBinding"):
    check(f"ClusterRoleBinding {crb['metadata']['name']} refers to a rendered ClusterRole", crb["roleRef"]["name"] in croles)
for r in roles.values():
    for rule in r.get("rules", []):
        check(f"Role {r['metadata']['namespace']}/{r['metadata']['name']} has no wildcards",
              "*" not in rule.get("resources", []) + rule.get("apiGroups", []) + rule.get("verbs", []))
member_ns = {f"fleet-member-{m}" for m in exp["members"]}
role_ns = {ns for ns, _ in roles}
check("Roles only in the release namespace and the members' hub namespaces", role_ns <= member_ns | {release_ns}, sorted(role_ns))
for m in exp["members"]:
    ns = f"fleet-member-{m}"
    mine = [r for (rns, _), r in roles.items() if rns == ns]
    check(f"a Role in {ns}", len(mine) == 1)
    if mine:
        check(f"Role in {ns} has exactly the rules of files/hub-member-role.yaml", mine[0]["rules"] == hub_role["rules"])
        bound = [b for b in of_kind("RoleBinding") if b["metadata"]["namespace"] == ns and b["roleRef"]["name"] == mine[0]["metadata"]["name"]]
        check(f"a RoleBinding in {ns} for that Role", len(bound) == 1)
ns_objs = {d["metadata"]["name"]: d for d in of_kind("Namespace")}
if exp["namespaces"]:
    check("a Namespace per member", set(ns_objs) == member_ns, sorted(ns_objs))
    check("member Namespaces kept on uninstall",
          all(n["metadata"].get("annotations", {}).get("helm.sh/resource-policy") == "keep" for n in ns_objs.values()))
else:
    check("no Namespace objects (createMemberNamespaces false)", not ns_objs, sorted(ns_objs))
own = [r for (rns, _), r in roles.items() if rns == release_ns]
# The release namespace: the pending-cleanup records (Secrets: create, list, delete) with
# cleanupOnRemove; with leader election exactly the Lease (get + update of this release's Lease by
# name, create, which RBAC cannot restrict by name), or sharded the shard Leases (list, create,
# update, delete; no get); no Events (none are recorded in the hub).
want_rules = []
if exp.get("member_secrets", True):
    want_rules.append({"apiGroups": [""], "resources": ["secrets"], "verbs": ["list", "watch"]})
if exp.get("cleanup"):
    # create and list cannot name objects; delete names the records of the listed members, as
    # src/fleet/cleanup.rs record_name derives them (tests/e2e/rbac proves the binary agrees).
    import hashlib
    lease_id = (flags.get("--leader-election-id") or [None])[0]
    want_rules.append({"apiGroups": [""], "resources": ["secrets"], "verbs": ["create", "list"]})
    want_rules.append({"apiGroups": [""], "resources": ["secrets"],
                       "resourceNames": [f"{lease_id}-cleanup-{m[:40].strip('-')}-{hashlib.sha256(m.encode()).hexdigest()[:8]}"
                                         for m in exp["members"]],
                       "verbs": ["delete"]})
if exp.get("shard"):
    want_rules.append({"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                       "verbs": ["list", "create", "update", "delete"]})
elif exp["leader"]:
    lease_id = (flags.get("--leader-election-id") or [None])[0]
    want_rules += [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": [lease_id], "verbs": ["get", "update"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
    ]
if want_rules:
    check("one Role in the release namespace", len(own) == 1)
    check("release-namespace Role: the member Secrets, the Leases (and the cleanup records with cleanupOnRemove), nothing else",
          bool(own) and own[0].get("rules") == want_rules, own[0].get("rules") if own else None)
else:
    check("no Role in the release namespace without leader election or cleanupOnRemove", not own,
          [r["metadata"]["name"] for r in own])

# --- Service, PDB, ServiceMonitor
def selects(selector, labels):
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())

# --- NetworkPolicy: only the health and metrics ports, scrapes from the configured peers only
nps = of_kind("NetworkPolicy")
MONITORING = [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]
if exp.get("netpol", True):
    check("one NetworkPolicy", len(nps) == 1, len(nps))
    np_spec = nps[0].get("spec", {}) if nps else {}
    check("NetworkPolicy networking.k8s.io/v1 in the release namespace",
          bool(nps) and nps[0].get("apiVersion") == "networking.k8s.io/v1"
          and nps[0]["metadata"].get("namespace") == release_ns)
    check("NetworkPolicy selects the pods", selects(np_spec.get("podSelector", {}).get("matchLabels"), pod_labels))
    check("NetworkPolicy restricts ingress only (egress open: members are anywhere)",
          np_spec.get("policyTypes") == ["Ingress"] and "egress" not in np_spec, np_spec.get("policyTypes"))
    ingress = np_spec.get("ingress", [])
    by_port = {}
    for rule in ingress:
        for p in rule.get("ports", []):
            by_port.setdefault(p.get("port"), []).append(rule)
    check("NetworkPolicy admits exactly the health and metrics container ports, TCP",
          sorted(by_port) == sorted([ports.get("health"), ports.get("metrics")])
          and all(len(r.get("ports", [])) == 1 and r["ports"][0].get("protocol") == "TCP" for r in ingress)
          and len(ingress) == 2, ingress)
    health_rule = (by_port.get(ports.get("health")) or [{}])[0]
    metrics_rule = (by_port.get(ports.get("metrics")) or [{}])[0]
    check("health port from anywhere (the kubelet probes from the node)", "from" not in health_rule, health_rule)
    want_from = exp.get("metrics_from", MONITORING)
    check("metrics port only from the configured scrapers", metrics_rule.get("from") == want_from, metrics_rule)
else:
    check("no NetworkPolicy with networkPolicy.enabled false", not nps)

svcs = of_kind("Service")
check("one metrics Service", len(svcs) == 1)
if svcs:
    svc = svcs[0]
    check("metrics Service selects the pods", selects(svc["spec"].get("selector"), pod_labels))
    check("metrics Service targets the metrics port", [p.get("targetPort") for p in svc["spec"]["ports"]] == ["metrics"])
pdbs = of_kind("PodDisruptionBudget")
if exp.get("pdb", True):
    check("one PodDisruptionBudget", len(pdbs) == 1)
    if pdbs:
        check("PodDisruptionBudget selects the pods", selects(pdbs[0]["spec"]["selector"]["matchLabels"], pod_labels))
        check("PodDisruptionBudget policy/v1", pdbs[0]["apiVersion"] == "policy/v1")
        if exp.get("shard"):
            check("sharded: the PDB keeps a quorum of owners (minAvailable 2 of 3)",
                  pdbs[0]["spec"].get("minAvailable") == 2, pdbs[0]["spec"])
else:
    check("no PodDisruptionBudget", not pdbs)
sms = of_kind("ServiceMonitor")
if exp["service_monitor"]:
    check("one ServiceMonitor", len(sms) == 1)
    if sms and svcs:
        sm = sms[0]
        check("ServiceMonitor monitoring.coreos.com/v1", sm["apiVersion"] == "monitoring.coreos.com/v1")
        check("ServiceMonitor selects the metrics Service", selects(sm["spec"]["selector"]["matchLabels"], svcs[0]["metadata"]["labels"]))
        ep = sm["spec"]["endpoints"][0]
        check("ServiceMonitor scrapes port metrics at /metrics", ep.get("port") == "metrics" and ep.get("path") == "/metrics")
        check("ServiceMonitor extra labels", sm["metadata"]["labels"].get("release") == "prometheus")
else:
    check("no ServiceMonitor by default", not sms)

# --- every namespaced object has a namespace (so the file can be applied as is)
cluster_scoped = {"Namespace", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition"}
check("every namespaced object names its namespace",
      all(d.get("metadata", {}).get("namespace") for d in docs if d.get("kind") not in cluster_scoped))
check("no CRDs in the rendering (Helm installs crds/ itself)", not of_kind("CustomResourceDefinition"))

for ok, desc, detail in results:
    line = f"{'ok  ' if ok else 'FAIL'} - [{set_name}] {desc}"
    if not ok and detail not in ("", None):
        line += f": {detail}"
    print(line)
PY

cat >"$tmp/rulefiles.py" <<'PY'
"""The two plain RBAC rule files: one document each, of the expected kind and name, no namespace."""
import sys
import yaml

path, kind, name = sys.argv[1:4]
docs = [d for d in yaml.safe_load_all(open(path)) if d is not None]
assert len(docs) == 1, f"{path}: {len(docs)} documents, want 1"
d = docs[0]
assert d.get("apiVersion") == "rbac.authorization.k8s.io/v1", d.get("apiVersion")
assert d.get("kind") == kind, d.get("kind")
assert d.get("metadata", {}).get("name") == name, d.get("metadata")
assert "namespace" not in d.get("metadata", {}), "must not set a namespace"
assert "{{" not in open(path).read(), "must not be templated"
assert d.get("rules"), "no rules"
for r in d["rules"]:
    assert set(r) <= {"apiGroups", "resources", "verbs", "resourceNames"}, r
    for k in ("apiGroups", "resources", "verbs"):
        assert isinstance(r.get(k), list) and r[k], (k, r)
        assert "*" not in r[k], ("wildcard", r)
print("ok")
PY

cat >"$tmp/member_rules.py" <<'PY'
"""The member ClusterRole and fleet system namespace Role grant exactly what the controller uses,
the rendered member manifest carries those rules verbatim and has no token Secret; argv[4], when
given, is a rendering with tokenSecret.create=true."""
import sys
import yaml

path, fleet_system_path, rendered = sys.argv[1:4]
rules = yaml.safe_load(open(path))["rules"]
grants = {}
for r in rules:
    for g in r["apiGroups"]:
        for res in r["resources"]:
            grants.setdefault((g, res), set()).update(r["verbs"])
# What tests/e2e/rbac proves the controller uses in a member (audit log of a real apiserver).
want = {
    ("networking.fleet.azure.com", "serviceexports"): {"get", "list", "watch", "patch", "delete"},
    ("networking.fleet.azure.com", "serviceexports/status"): {"patch"},
    ("", "services"): {"get", "list", "watch"},
    ("events.k8s.io", "events"): {"create"},
    ("discovery.k8s.io", "endpointslices"): {"get", "list", "watch", "patch"},
    ("networking.fleet.azure.com", "serviceimports"): {"get", "list", "watch", "create", "patch", "delete"},
    ("networking.fleet.azure.com", "serviceimports/status"): {"update"},
    ("networking.fleet.azure.com", "multiclusterservices"): {"get", "list", "watch", "patch", "delete"},
    ("networking.fleet.azure.com", "multiclusterservices/status"): {"patch"},
}
assert grants == want, f"grants {grants} != {want}"
# The writes in the fleet system namespace only (a Role there, never cluster-wide).
ns_rules = yaml.safe_load(open(fleet_system_path))["rules"]
ns_grants = {}
for r in ns_rules:
    for g in r["apiGroups"]:
        for res in r["resources"]:
            ns_grants.setdefault((g, res), set()).update(r["verbs"])
ns_want = {
    ("", "services"): {"create", "patch", "delete"},
    ("discovery.k8s.io", "endpointslices"): {"create", "update", "delete"},
}
assert ns_grants == ns_want, f"fleet system namespace grants {ns_grants} != {ns_want}"
docs = [d for d in yaml.safe_load_all(open(rendered)) if d]
kinds = sorted(d["kind"] for d in docs)
# No legacy (non-expiring) token Secret by default: tokens are minted with `kubectl create token`.
assert kinds == ["ClusterRole", "ClusterRoleBinding", "Namespace", "Role", "RoleBinding", "ServiceAccount"], kinds
cr = next(d for d in docs if d["kind"] == "ClusterRole")
assert cr["rules"] == rules, "rendered ClusterRole rules differ from files/member-clusterrole.yaml"
crb = next(d for d in docs if d["kind"] == "ClusterRoleBinding")
sa = next(d for d in docs if d["kind"] == "ServiceAccount")
assert crb["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": cr["metadata"]["name"]}
assert crb["subjects"] == [{"kind": "ServiceAccount", "name": sa["metadata"]["name"], "namespace": sa["metadata"]["namespace"]}]
role = next(d for d in docs if d["kind"] == "Role")
assert role["metadata"]["namespace"] == "fleet-system", role["metadata"]
assert role["rules"] == ns_rules, "rendered Role rules differ from files/member-fleet-system-role.yaml"
rb = next(d for d in docs if d["kind"] == "RoleBinding")
assert rb["metadata"]["namespace"] == "fleet-system", rb["metadata"]
assert rb["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role["metadata"]["name"]}
assert rb["subjects"] == crb["subjects"]
if len(sys.argv) > 4:
    # The opt-in legacy token Secret (tokenSecret.create=true) belongs to the same ServiceAccount.
    with_secret = [d for d in yaml.safe_load_all(open(sys.argv[4])) if d]
    secrets = [d for d in with_secret if d["kind"] == "Secret"]
    assert len(secrets) == 1, secrets
    sec = secrets[0]
    assert sec["type"] == "kubernetes.io/service-account-token"
    assert sec["metadata"]["annotations"]["kubernetes.io/service-account.name"] == sa["metadata"]["name"]
print("ok")
PY

cat >"$tmp/hub_rules.py" <<'PY'
"""The per-member hub Role grants exactly what the controller uses."""
import sys
import yaml

rules = yaml.safe_load(open(sys.argv[1]))["rules"]
grants = {}
for r in rules:
    for g in r["apiGroups"]:
        for res in r["resources"]:
            grants.setdefault((g, res), set()).update(r["verbs"])
# What tests/e2e/rbac proves the controller uses in a member's hub namespace (no update, no Events;
# list and watch are the hub reader ClusterRole's).
want = {
    ("networking.fleet.azure.com", "internalserviceexports"): {"get", "create", "patch", "delete"},
    ("networking.fleet.azure.com", "endpointsliceexports"): {"get", "create", "patch", "delete"},
    ("networking.fleet.azure.com", "internalserviceimports"): {"get", "create", "patch", "delete"},
    ("networking.fleet.azure.com", "endpointsliceimports"): {"get", "patch"},
    ("cluster.kubernetes-fleet.io", "internalmemberclusters"): {"get"},
    ("cluster.kubernetes-fleet.io", "internalmemberclusters/status"): {"update"},
    ("fleetnet.azure.com", "memberstatuses"): {"get", "create", "patch", "delete"},
}
assert grants == want, f"grants {grants} != {want}"
print("ok")
PY

# --- lint -------------------------------------------------------------------------------------------
run_check "helm lint --strict charts/fleetnet-hub (defaults)" "$HELM" lint --strict "$hub_chart"
run_check "helm lint --strict charts/fleetnet-hub-member" "$HELM" lint --strict "$member_chart"
run_check "helm lint --strict charts/fleetnet-hub-member (legacy token Secret, kubectl manifest values)" \
  "$HELM" lint --strict "$member_chart" --set createNamespace=true --set tokenSecret.create=true
for values in "$hub_chart"/ci/*-values.yaml; do
  run_check "helm lint --strict charts/fleetnet-hub -f ci/$(basename "$values")" \
    "$HELM" lint --strict "$hub_chart" -f "$values"
done

run_check "helm package charts/fleetnet-hub" "$HELM" package "$hub_chart" -d "$tmp/pkg"
run_check "helm package charts/fleetnet-hub-member" "$HELM" package "$member_chart" -d "$tmp/pkg"

# --- the plain RBAC rule files -------------------------------------------------------------------------
run_check "files/hub-member-role.yaml is one plain Role fleetnet-hub-member" \
  "$PY" "$tmp/rulefiles.py" "$hub_chart/files/hub-member-role.yaml" Role fleetnet-hub-member
run_check "files/hub-member-role.yaml grants exactly what the jobs use in a member's hub namespace" \
  "$PY" "$tmp/hub_rules.py" "$hub_chart/files/hub-member-role.yaml"
run_check "files/member-clusterrole.yaml is one plain ClusterRole fleetnet-hub-member" \
  "$PY" "$tmp/rulefiles.py" "$hub_chart/files/member-clusterrole.yaml" ClusterRole fleetnet-hub-member
run_check "member chart's files/member-clusterrole.yaml is identical to the hub chart's" \
  cmp "$hub_chart/files/member-clusterrole.yaml" "$member_chart/files/member-clusterrole.yaml"
run_check "files/member-fleet-system-role.yaml is one plain Role fleetnet-hub-member" \
  "$PY" "$tmp/rulefiles.py" "$hub_chart/files/member-fleet-system-role.yaml" Role fleetnet-hub-member
run_check "member chart's files/member-fleet-system-role.yaml is identical to the hub chart's" \
  cmp "$hub_chart/files/member-fleet-system-role.yaml" "$member_chart/files/member-fleet-system-role.yaml"

# --- the member manifest (kubectl apply) ---------------------------------------------------------------
render_member_manifest() {
  echo "# Generated from charts/fleetnet-hub-member by tests/chart.sh (FLEETNET_CHART_UPDATE=1); do not edit."
  echo "# Member-side RBAC for fleetnet-hub. In EACH member cluster:"
  echo "#   kubectl apply -f charts/fleetnet-hub-member.yaml"
  echo "# then build the member's kubeconfig from a bound token:"
  echo "#   kubectl -n $release_ns create token fleetnet-hub --duration=720h"
  echo "# and rotate it before it expires (see charts/fleetnet-hub-member/README.md)."
  "$HELM" template --kube-version "$kube_version" fleetnet-hub-member "$member_chart" --namespace "$release_ns" --set createNamespace=true
}
if render_member_manifest >"$out/fleetnet-hub-member.yaml" 2>"$tmp/member.err"; then
  pass "helm template charts/fleetnet-hub-member"
  if [ "${FLEETNET_CHART_UPDATE:-}" = 1 ]; then
    cp "$out/fleetnet-hub-member.yaml" "$member_manifest"
    echo "# wrote $member_manifest"
  fi
  run_check "charts/fleetnet-hub-member.yaml is up to date (FLEETNET_CHART_UPDATE=1 bash tests/chart.sh rewrites it)" \
    diff -u -B "$member_manifest" "$out/fleetnet-hub-member.yaml"
  if "$HELM" template --kube-version "$kube_version" fleetnet-hub-member "$member_chart" --namespace "$release_ns" \
    --set tokenSecret.create=true >"$tmp/member-token-secret.yaml" 2>"$tmp/member.err"; then
    run_check "member ClusterRole and fleet system Role: exactly the used grants, rendered verbatim; token Secret only on request" \
      "$PY" "$tmp/member_rules.py" "$hub_chart/files/member-clusterrole.yaml" "$hub_chart/files/member-fleet-system-role.yaml" "$member_manifest" "$tmp/member-token-secret.yaml"
  else
    fail "helm template charts/fleetnet-hub-member --set tokenSecret.create=true"
    sed 's/^/       | /' "$tmp/member.err"
  fi
else
  fail "helm template charts/fleetnet-hub-member"
  sed 's/^/       | /' "$tmp/member.err"
fi

# --- hub chart renderings -------------------------------------------------------------------------------
render() {  # render SET [helm args...]
  local set="$1"; shift
  if "$HELM" template --kube-version "$kube_version" "$release" "$hub_chart" --namespace "$release_ns" "$@" >"$out/$set.yaml" 2>"$tmp/$set.err"; then
    pass "helm template [$set]"
    "$PY" "$tmp/check.py" "$set" "$out/$set.yaml" "$hub_chart/files/hub-member-role.yaml" "$release_ns" "$release" "$tmp/run-help.txt" >"$tmp/$set.results" 2>&1 || true
    local n_ok n_fail
    n_ok=$(grep -c '^ok  ' "$tmp/$set.results" || true)
    n_fail=$(grep -c '^FAIL' "$tmp/$set.results" || true)
    if [ "$n_ok" -eq 0 ]; then
      fail "[$set] checker ran no assertion"
      sed 's/^/       | /' "$tmp/$set.results"
      return
    fi
    passed=$((passed + n_ok))
    failed=$((failed + n_fail))
    # The checker's own crash (a traceback) counts as a failure too.
    if grep -q '^Traceback' "$tmp/$set.results"; then
      fail "[$set] checker crashed"
      sed 's/^/       | /' "$tmp/$set.results"
    fi
    grep '^FAIL' "$tmp/$set.results" || true
    echo "ok   - [$set] $n_ok assertions passed, $n_fail failed"
  else
    fail "helm template [$set]"
    sed 's/^/       | /' "$tmp/$set.err"
  fi
}
render defaults
for values in "$hub_chart"/ci/*-values.yaml; do
  set="$(basename "$values" -values.yaml)"
  render "$set" -f "$values"
done

# --- value sets that must be refused --------------------------------------------------------------------
refused() {  # refused DESC EXPECTED-MESSAGE [helm args...]
  local desc="$1" want="$2"; shift 2
  if "$HELM" template --kube-version "$kube_version" "$release" "$hub_chart" --namespace "$release_ns" "$@" >"$tmp/refused.out" 2>&1; then
    fail "refused: $desc (it rendered)"
  elif grep -qF -- "$want" "$tmp/refused.out"; then
    pass "refused: $desc"
  else
    fail "refused: $desc (error lacks \"$want\")"
    sed 's/^/       | /' "$tmp/refused.out" | head -n 10
  fi
}
refused "two replicas without leader election" "needs leaderElection.enabled" \
  --set replicaCount=2 --set leaderElection.enabled=false
refused "a member name that is not a DNS-1123 label" "does not match pattern" --set 'members={Member_1}'
refused "a member listed twice" "members" --set 'members={a,a}'
refused "a hub namespace longer than 63 characters" "longer than 63" \
  --set "members={$(printf 'm%.0s' $(seq 1 60))}"
refused "memberConfig for a member not in members" "is not listed in members" \
  --set 'members={a}' --set 'memberConfig.b.azureResourceGroup=rg'
refused "Traffic Manager without an Azure credential" "needs azure.credential" --set trafficManager.enabled=true
refused "client-secret without an existing Secret" "needs azure.clientSecret.existingSecret" \
  --set azure.credential=client-secret --set azure.tenantId=t --set azure.clientId=c
refused "an unknown credential kind" "azure" --set azure.credential=password
refused "an unknown top-level value" "additional properties" --set replicas=3
refused "an OTLP protocol other than grpc or http/protobuf" "otlp" --set otlp.protocol=http/json
refused "a plain http OTLP endpoint off loopback without otlp.allowHttp" "plain http off loopback" \
  --set otlp.endpoint=http://otel-collector.observability:4318
refused "memberTrust flags that are not booleans" "memberTrust" --set-string memberTrust.allowExecPlugins=yes
refused "a quota of 0 (0 would mean nothing is ever exported)" "maxExportsPerMember" --set quotas.maxExportsPerMember=0
# cleanupOnRemove without leader election: the records' prefix (--leader-election-id) is still
# passed, so the names the Role grants delete on are the ones the binary writes.
if "$HELM" template --kube-version "$kube_version" "$release" "$hub_chart" --namespace "$release_ns" \
  --set replicaCount=1 --set leaderElection.enabled=false --set controller.cleanupOnRemove=true \
  --set 'members={member-1}' >"$tmp/cleanup-single.yaml" 2>&1 \
  && grep -qx -- "            - --leader-election-id=$release" "$tmp/cleanup-single.yaml" \
  && grep -qx -- '      - "fleetnet-hub-cleanup-member-1-9811fb1b"' "$tmp/cleanup-single.yaml" \
  && ! grep -q -- "--leader-elect$" "$tmp/cleanup-single.yaml"; then
  pass "cleanupOnRemove without leader election: --leader-election-id passed, the record's delete granted by name"
else
  fail "cleanupOnRemove without leader election: --leader-election-id passed, the record's delete granted by name"
  sed 's/^/       | /' "$tmp/cleanup-single.yaml" | grep -n -- "leader-election\|cleanup\|Error" | head -n 10
fi
# networkPolicy.metrics.from empty: the metrics port open to any source, still only the two ports.
if "$HELM" template --kube-version "$kube_version" "$release" "$hub_chart" --namespace "$release_ns" \
  --set-json 'networkPolicy.metrics.from=[]' -s templates/networkpolicy.yaml >"$tmp/np-open.yaml" 2>&1; then
  run_check "networkPolicy.metrics.from [] admits any source on the metrics port, nothing else" "$PY" -c '
import sys, yaml
np = yaml.safe_load(open(sys.argv[1]))
rules = np["spec"]["ingress"]
assert [r["ports"] for r in rules] == [[{"port": 8081, "protocol": "TCP"}], [{"port": 8080, "protocol": "TCP"}]], rules
assert all("from" not in r for r in rules), rules
' "$tmp/np-open.yaml"
else
  fail "helm template with networkPolicy.metrics.from []"
  sed 's/^/       | /' "$tmp/np-open.yaml" | head -n 10
fi
refused "a NetworkPolicy peer that is not a NetworkPolicyPeer" "additional properties" \
  --set-json 'networkPolicy.metrics.from=[{"namespace":"monitoring"}]'
run_check "a plain http OTLP endpoint on loopback renders without otlp.allowHttp" \
  "$HELM" template --kube-version "$kube_version" "$release" "$hub_chart" --namespace "$release_ns" \
  --set otlp.endpoint=http://127.0.0.1:4318
refused "a Custom cloud without endpoints" "azure.armEndpoint is required" \
  --set azure.credential=azure-cli --set azure.cloud=Custom
refused "a ServiceMonitor without the metrics Service" "needs metrics.service.enabled" \
  --set metrics.serviceMonitor.enabled=true --set metrics.service.enabled=false

# >>> monitoring: ServiceMonitor, PrometheusRule, Grafana dashboard (issue #17) >>>>>>>>>>>>>>>>>>>>>>>>>>
# Renderings with the monitoring values on, checked for shape here; tests/e2e/operating proves the
# rules with promtool, evaluates every rule and dashboard query against a real Prometheus, and
# applies these objects to a hub serving the Prometheus Operator's CRDs.
cat >"$tmp/monitoring.py" <<'PY'
"""Assertions on a rendering with metrics.{serviceMonitor,prometheusRule,grafanaDashboard} on."""
import json
import re
import sys
import yaml

set_name, path = sys.argv[1:3]
docs = [d for d in yaml.safe_load_all(open(path)) if d]
results = []


def check(desc, cond, detail=""):
    results.append((bool(cond), desc, detail))


def of_kind(kind):
    return [d for d in docs if d.get("kind") == kind]


custom = set_name == "monitoring-custom"
svc = next((d for d in of_kind("Service")), {})
job = svc.get("metadata", {}).get("name")
selector = 'job="custom"' if custom else f'job="{job}"'
rule_ns = "monitoring" if custom else "fleetnet-system"
label, label_value = ("my_dashboards", "yes") if custom else ("grafana_dashboard", "1")

sms = of_kind("ServiceMonitor")
check("one ServiceMonitor", len(sms) == 1)
prs = of_kind("PrometheusRule")
check("one PrometheusRule", len(prs) == 1)
pr = prs[0] if prs else {}
check("PrometheusRule monitoring.coreos.com/v1", pr.get("apiVersion") == "monitoring.coreos.com/v1")
check(f"PrometheusRule in {rule_ns}", pr.get("metadata", {}).get("namespace") == rule_ns)
rules = [r for g in pr.get("spec", {}).get("groups", []) for r in g.get("rules", [])]
names = [r.get("alert") for r in rules]
check("every rule is an alert with a unique name", all(names) and len(set(names)) == len(names), names)
for r in rules:
    a = r.get("alert")
    check(f"{a}: severity warning or critical", r.get("labels", {}).get("severity") in ("warning", "critical"))
    check(f"{a}: summary and description", r.get("annotations", {}).get("summary") and r.get("annotations", {}).get("description"))
    check(f"{a}: a `for` duration", re.fullmatch(r"([0-9]+(ms|s|m|h|d|w|y))+", str(r.get("for", ""))))
    selectors = re.findall(r"\{([^{}]*)\}", r.get("expr", ""))
    check(f"{a}: every selector carries {selector}", selectors and all(s.strip().startswith(selector) for s in selectors), selectors)
    if custom:
        check(f"{a}: alertLabels", r.get("labels", {}).get("team") == "networking")
        check(f"{a}: runbook_url", r.get("annotations", {}).get("runbook_url") == f"https://runbooks.example/fleetnet#{a.lower()}")
always = {"FleetnetMemberFailing", "FleetnetMemberNotSynced", "FleetnetJobFailing", "FleetnetExportLatencyHigh", "FleetnetReconcileErrors",
          "FleetnetControllerErrors", "FleetnetApiThrottled", "FleetnetRateLimiterSaturated", "FleetnetHubUnreachable",
          "FleetnetDown"}
if set_name == "monitoring-sharded":
    want = always | {"FleetnetMemberWithoutOwner"}
elif custom:
    want = (always | {"FleetnetNoLeader"}) - {"FleetnetDown"}
else:
    want = always | {"FleetnetNoLeader"}
check("the alerts of this mode (NoLeader with leaderElection, WithoutOwner with shardMembers; disabled dropped)", set(names) == want, sorted(set(names) ^ want))
if custom:
    lat = next((r for r in rules if r.get("alert") == "FleetnetExportLatencyHigh"), {})
    check("thresholds.exportLatencyP99Seconds in the expression", lat.get("expr", "").rstrip().endswith("> 30"), lat.get("expr"))
    check("thresholds.exportLatencyFor", lat.get("for") == "20m")

cms = [d for d in of_kind("ConfigMap") if label in (d.get("metadata", {}).get("labels") or {})]
check(f"one ConfigMap labelled {label}", len(cms) == 1)
cm = cms[0] if cms else {}
check(f"label value {label_value!r}", (cm.get("metadata", {}).get("labels") or {}).get(label) == label_value)
if custom:
    check("dashboard annotations", (cm.get("metadata", {}).get("annotations") or {}).get("grafana_folder") == "Fleet")
data = cm.get("data") or {}
check("one dashboard JSON in the ConfigMap", len(data) == 1 and all(k.endswith(".json") for k in data), list(data))
try:
    board = json.loads(next(iter(data.values()), "{}"))
except ValueError as e:
    board = {}
    check("dashboard JSON parses", False, str(e))
variables = {v.get("name"): v for v in board.get("templating", {}).get("list", [])}
check("dashboard variables datasource, job, member", {"datasource", "job", "member"} <= set(variables), sorted(variables))
check("member variable is multi-value with All", variables.get("member", {}).get("multi") and variables.get("member", {}).get("includeAll"))
panels = board.get("panels", [])
ids = [p.get("id") for p in panels]
check("panel ids unique", len(set(ids)) == len(ids))
rows = [p.get("title") for p in panels if p.get("type") == "row"]
check("rows Fleet, Exports, Reconciles, Kubernetes API, Process", rows == ["Fleet", "Exports", "Reconciles", "Kubernetes API", "Process"], rows)
for p in panels:
    if p.get("type") == "row":
        continue
    g = p.get("gridPos", {})
    check(f"panel {p.get('title')!r}: within the 24-column grid", g.get("x", 0) + g.get("w", 0) <= 24)
    check(f"panel {p.get('title')!r}: queries the datasource variable", p.get("datasource", {}).get("uid") == "${datasource}")
    exprs = [t.get("expr") for t in p.get("targets", [])]
    check(f"panel {p.get('title')!r}: has queries", exprs and all(exprs))
check("a heatmap of the export latency", any(p.get("type") == "heatmap" and "fleetnet_export_latency_seconds_bucket" in json.dumps(p) for p in panels))
member_panels = [p for p in panels if "$member" in json.dumps(p.get("targets", []))]
check("panels filtered by $member", len(member_panels) >= 5, len(member_panels))

for ok, desc, detail in results:
    line = f"{'ok  ' if ok else 'FAIL'} - [{set_name}] {desc}"
    if not ok and detail not in ("", None):
        line += f": {detail}"
    print(line)
PY

monitoring_render() {  # monitoring_render SET [helm args...]
  local set="$1"; shift
  if "$HELM" template --kube-version "$kube_version" "$release" "$hub_chart" --namespace "$release_ns" \
    --set metrics.serviceMonitor.enabled=true --set metrics.prometheusRule.enabled=true \
    --set metrics.grafanaDashboard.enabled=true "$@" >"$out/$set.yaml" 2>"$tmp/$set.err"; then
    pass "helm template [$set]"
    "$PY" "$tmp/monitoring.py" "$set" "$out/$set.yaml" >"$tmp/$set.results" 2>&1 || true
    if grep -q '^Traceback' "$tmp/$set.results" || ! grep -q '^ok  ' "$tmp/$set.results"; then
      fail "[$set] monitoring checker crashed or ran nothing"
      sed 's/^/       | /' "$tmp/$set.results"
      return
    fi
    passed=$((passed + $(grep -c '^ok  ' "$tmp/$set.results" || true)))
    failed=$((failed + $(grep -c '^FAIL' "$tmp/$set.results" || true)))
    grep '^FAIL' "$tmp/$set.results" || true
    echo "ok   - [$set] $(grep -c '^ok  ' "$tmp/$set.results") monitoring assertions passed"
  else
    fail "helm template [$set]"
    sed 's/^/       | /' "$tmp/$set.err"
  fi
}
cat >"$tmp/monitoring-custom-values.yaml" <<'YAML'
metrics:
  prometheusRule:
    namespace: monitoring
    selector: job="custom"
    alertLabels: {team: networking}
    runbookUrl: https://runbooks.example/fleetnet
    disabled: [FleetnetDown]
    thresholds: {exportLatencyP99Seconds: 30, exportLatencyFor: 20m}
  grafanaDashboard:
    label: my_dashboards
    labelValue: "yes"
    annotations: {grafana_folder: Fleet}
YAML
run_check "helm lint --strict charts/fleetnet-hub (monitoring on)" "$HELM" lint --strict "$hub_chart" \
  --set metrics.serviceMonitor.enabled=true --set metrics.prometheusRule.enabled=true --set metrics.grafanaDashboard.enabled=true
monitoring_render monitoring
monitoring_render monitoring-sharded -f "$hub_chart/ci/sharded-values.yaml"
monitoring_render monitoring-custom -f "$tmp/monitoring-custom-values.yaml"
refused "a negative alert threshold" "minimum" --set metrics.prometheusRule.thresholds.apiThrottledPerSecond=-1
refused "an alert duration that is not a Prometheus duration" "does not match pattern" \
  --set 'metrics.prometheusRule.thresholds.downFor=5 minutes'
refused "an unknown alert threshold" "additional properties" --set metrics.prometheusRule.thresholds.latency=1
refused "an empty Grafana sidecar label" "grafanaDashboard" --set metrics.grafanaDashboard.label=
# <<< monitoring <<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<

# --- the values reference, the derived grace period, the metrics detail ---------------------------------
# charts/fleetnet-hub/README.md's values table is generated from values.schema.json (descriptions and
# x-flag there, defaults from values.yaml) by tests/chart_values.py; FLEETNET_CHART_UPDATE=1 rewrites it.
values_ref=("$PY" "$root/tests/chart_values.py" "$hub_chart/values.schema.json" "$hub_chart/values.yaml" "$hub_chart/README.md")
if [ "${FLEETNET_CHART_UPDATE:-}" = 1 ]; then
  run_check "README.md values reference rewritten from values.schema.json" "${values_ref[@]}" --write
else
  run_check "README.md values reference is generated from values.schema.json (FLEETNET_CHART_UPDATE=1 bash tests/chart.sh rewrites it)" \
    "${values_ref[@]}"
fi
# grace = drain + margin: the kubelet never kills a drain that is within its bound.
grace_of() {  # grace_of DRAIN GRACE [helm args...]: the rendered grace and --shutdown-timeout
  local drain="$1" grace="$2"; shift 2
  "$HELM" template --kube-version "$kube_version" "$release" "$hub_chart" --namespace "$release_ns" \
    -s templates/deployment.yaml "$@" >"$tmp/grace.yaml" 2>&1 \
    && grep -qx -- "      terminationGracePeriodSeconds: $grace" "$tmp/grace.yaml" \
    && grep -qx -- "            - --shutdown-timeout=${drain}s" "$tmp/grace.yaml"
}
run_check "terminationGracePeriodSeconds = shutdown.drainSeconds + graceMarginSeconds (defaults: 25 + 20)" grace_of 25 45
run_check "a longer drain lengthens the grace (60 + 20), passed as --shutdown-timeout" grace_of 60 80 --set shutdown.drainSeconds=60
run_check "a wider margin (25 + 40)" grace_of 25 65 --set shutdown.graceMarginSeconds=40
refused "a grace margin under 10 s (a drain at its bound would be killed)" "graceMarginSeconds" --set shutdown.graceMarginSeconds=5
refused "terminationGracePeriodSeconds set directly (it is derived from shutdown)" "additional properties" \
  --set terminationGracePeriodSeconds=30
if "$HELM" template --kube-version "$kube_version" "$release" "$hub_chart" --namespace "$release_ns" \
  -s templates/deployment.yaml --set metrics.detail=member >"$tmp/detail.yaml" 2>&1 \
  && grep -qx -- "            - --metrics-detail=member" "$tmp/detail.yaml"; then
  pass "metrics.detail=member renders --metrics-detail=member"
else
  fail "metrics.detail=member renders --metrics-detail=member"
fi
refused "an unknown metrics.detail" "detail" --set metrics.detail=everything
refused "a member response cap that is not a size" "memberMaxResponseBytes" --set quotas.memberMaxResponseBytes=16MB

# --- every rendering parses strictly: a duplicated mapping key (Kubernetes keeps the last one, PyYAML
# and most tools silently too) is an error ------------------------------------------------------------
cat >"$tmp/strict.py" <<'PY'
"""Loads every document of each file given, failing on a duplicated mapping key."""
import sys
import yaml


class Strict(yaml.SafeLoader):
    pass


def mapping(loader, node, deep=False):
    seen = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicated key {key!r}", key_node.start_mark)
        seen.add(key)
    return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)


Strict.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, mapping)
for path in sys.argv[1:]:
    docs = [d for d in yaml.load_all(open(path), Loader=Strict) if d is not None]
    assert docs, f"{path}: no documents"
print("ok")
PY
printf 'a:\n  b: 1\n  b: 2\n' >"$tmp/duplicated.yaml"
if "$PY" "$tmp/strict.py" "$tmp/duplicated.yaml" >/dev/null 2>&1; then
  fail "the strict YAML check finds a duplicated key (it accepted one)"
else
  pass "the strict YAML check finds a duplicated key"
fi
for rendered in "$out"/*.yaml; do
  run_check "no duplicated key in $(basename "$rendered")" "$PY" "$tmp/strict.py" "$rendered"
done

if [ -n "${FLEETNET_CHART_OUT:-}" ]; then echo "# renderings in $out"; else echo "# renderings were in $out (temporary; set FLEETNET_CHART_OUT to keep them)"; fi
summary
[ "$failed" -eq 0 ]
