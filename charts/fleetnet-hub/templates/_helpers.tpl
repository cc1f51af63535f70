{{/* Chart name, truncated to a DNS label. */}}
{{- define "fleetnet-hub.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Fully qualified app name; the release name alone when it already contains the chart name. */}}
{{- define "fleetnet-hub.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "fleetnet-hub.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "fleetnet-hub.selectorLabels" -}}
app.kubernetes.io/name: {{ include "fleetnet-hub.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "fleetnet-hub.labels" -}}
helm.sh/chart: {{ include "fleetnet-hub.chart" . }}
{{ include "fleetnet-hub.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: fleetnet-hub
{{- end -}}

{{- define "fleetnet-hub.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "fleetnet-hub.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "fleetnet-hub.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/* Name of the ConfigMap holding the --member-config file. */}}
{{- define "fleetnet-hub.memberConfigName" -}}
{{- printf "%s-member-config" (include "fleetnet-hub.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The --member-config file content. */}}
{{- define "fleetnet-hub.memberConfigFile" -}}
{{- dict "members" .Values.memberConfig | toYaml -}}
{{- end -}}

{{/* Azure endpoints: explicit values win over the cloud preset. */}}
{{- define "fleetnet-hub.azureArmEndpoint" -}}
{{- $clouds := dict "AzurePublicCloud" "https://management.azure.com" "AzureChinaCloud" "https://management.chinacloudapi.cn" "AzureUSGovernment" "https://management.usgovcloudapi.net" -}}
{{- if .Values.azure.armEndpoint -}}
{{- .Values.azure.armEndpoint -}}
{{- else if hasKey $clouds .Values.azure.cloud -}}
{{- get $clouds .Values.azure.cloud -}}
{{- else -}}
{{- fail "azure.armEndpoint is required when azure.cloud is Custom" -}}
{{- end -}}
{{- end -}}

{{- define "fleetnet-hub.azureAuthorityHost" -}}
{{- $clouds := dict "AzurePublicCloud" "https://login.microsoftonline.com" "AzureChinaCloud" "https://login.chinacloudapi.cn" "AzureUSGovernment" "https://login.microsoftonline.us" -}}
{{- if .Values.azure.authorityHost -}}
{{- .Values.azure.authorityHost -}}
{{- else if hasKey $clouds .Values.azure.cloud -}}
{{- get $clouds .Values.azure.cloud -}}
{{- else -}}
{{- fail "azure.authorityHost is required when azure.cloud is Custom" -}}
{{- end -}}
{{- end -}}

{{/*
Checks that the schema cannot express; included once, from the Deployment.
*/}}
{{- define "fleetnet-hub.validate" -}}
{{- if and (gt (int .Values.replicaCount) 1) (not .Values.leaderElection.enabled) -}}
{{- fail "replicaCount > 1 needs leaderElection.enabled: true (only one replica may write to the hub)" -}}
{{- end -}}
{{- $seen := dict -}}
{{- range .Values.members -}}
{{- if not (regexMatch "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$" .) -}}
{{- fail (printf "members: %q is not a DNS-1123 label (lower-case letters, digits, '-', starting and ending alphanumeric)" .) -}}
{{- end -}}
{{- $ns := printf "%s%s" $.Values.hubNamespacePrefix . -}}
{{- if gt (len $ns) 63 -}}
{{- fail (printf "members: hub namespace %q is longer than 63 characters" $ns) -}}
{{- end -}}
{{- if hasKey $seen . -}}
{{- fail (printf "members: %q is listed twice" .) -}}
{{- end -}}
{{- $_ := set $seen . true -}}
{{- end -}}
{{- range $name, $_ := .Values.memberConfig -}}
{{- if not (has $name $.Values.members) -}}
{{- fail (printf "memberConfig: %q is not listed in members" $name) -}}
{{- end -}}
{{- end -}}
{{- if and .Values.trafficManager.enabled (not .Values.azure.credential) -}}
{{- fail "trafficManager.enabled needs azure.credential (workload-identity, managed-identity, client-secret or azure-cli)" -}}
{{- end -}}
{{- with .Values.otlp -}}
{{- if and (hasPrefix "http://" .endpoint) (not .allowHttp) (not (regexMatch "^http://(localhost|127\\.[0-9.]+|\\[::1\\])(:[0-9]+)?(/.*)?$" .endpoint)) -}}
{{- fail (printf "otlp.endpoint %q is plain http off loopback: spans name members and objects; use https (otlp.caSecret for a private CA) or set otlp.allowHttp: true" .endpoint) -}}
{{- end -}}
{{- end -}}
{{- if eq .Values.azure.credential "client-secret" -}}
{{- if not .Values.azure.clientSecret.existingSecret -}}
{{- fail "azure.credential client-secret needs azure.clientSecret.existingSecret" -}}
{{- end -}}
{{- if or (not .Values.azure.tenantId) (not .Values.azure.clientId) -}}
{{- fail "azure.credential client-secret needs azure.tenantId and azure.clientId" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* OTEL_RESOURCE_ATTRIBUTES from a map, sorted by key. */}}
{{- define "fleetnet-hub.otelResourceAttributes" -}}
{{- $pairs := list -}}
{{- range $k := keys .Values.otlp.resourceAttributes | sortAlpha -}}
{{- $pairs = append $pairs (printf "%s=%v" $k (get $.Values.otlp.resourceAttributes $k)) -}}
{{- end -}}
{{- join "," $pairs -}}
{{- end -}}

{{/* The leader-election Lease name. */}}
{{- define "fleetnet-hub.leaderElectionId" -}}
{{- default (include "fleetnet-hub.fullname" .) .Values.leaderElection.id -}}
{{- end -}}

{{- /*
The name of member .member's cleanup record under prefix .id, as src/fleet/removal/records.rs record_name
derives it (shard.rs name_part): the member name (a DNS-1123 label, so nothing to replace) cut to
40 characters and trimmed of '-', then the first 4 bytes of its SHA-256 in lowercase hex.
tests/e2e/rbac/ proves the two agree: the controller deletes a record with only this grant.
*/ -}}
{{- define "fleetnet-hub.cleanupRecordName" -}}
{{- printf "%s-cleanup-%s-%s" .id (trunc 40 .member | trimAll "-") (sha256sum .member | trunc 8) -}}
{{- end -}}
