{{- define "fleetnet-hub-member.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: fleetnet-hub
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* The ClusterRole manifest from files/member-clusterrole.yaml (a plain manifest shared with the
fleetnet-hub chart and the Rust tests). */}}
{{- define "fleetnet-hub-member.clusterRole" -}}
{{- $role := .Files.Get "files/member-clusterrole.yaml" | fromYaml -}}
{{- if or (ne (get $role "kind") "ClusterRole") (not (get $role "rules")) -}}
{{- fail "files/member-clusterrole.yaml must be a single ClusterRole with rules" -}}
{{- end -}}
{{- toYaml $role -}}
{{- end -}}

{{- define "fleetnet-hub-member.clusterRoleName" -}}
{{- $role := include "fleetnet-hub-member.clusterRole" . | fromYaml -}}
{{- default $role.metadata.name .Values.clusterRoleName -}}
{{- end -}}

{{- define "fleetnet-hub-member.tokenSecretName" -}}
{{- default (printf "%s-token" .Values.serviceAccount.name) .Values.tokenSecret.name -}}
{{- end -}}

{{/* The Role manifest from files/member-fleet-system-role.yaml (a plain manifest shared with the
fleetnet-hub chart and the Rust tests). */}}
{{- define "fleetnet-hub-member.fleetSystemRole" -}}
{{- $role := .Files.Get "files/member-fleet-system-role.yaml" | fromYaml -}}
{{- if or (ne (get $role "kind") "Role") (not (get $role "rules")) -}}
{{- fail "files/member-fleet-system-role.yaml must be a single Role with rules" -}}
{{- end -}}
{{- toYaml $role -}}
{{- end -}}
