{{/* The release's name for its objects, at most 63 characters. */}}
{{- define "mcp-cancel-proxy.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* The labels that select the pods. */}}
{{- define "mcp-cancel-proxy.selector" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The labels of every object. */}}
{{- define "mcp-cancel-proxy.labels" -}}
{{ include "mcp-cancel-proxy.selector" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* The upstream URL: the value, or the server container's address. */}}
{{- define "mcp-cancel-proxy.upstream" -}}
{{- if .Values.upstream -}}
{{- .Values.upstream -}}
{{- else if .Values.server.enabled -}}
{{- printf "http://127.0.0.1:%v%s" .Values.server.port .Values.server.path -}}
{{- else -}}
{{- fail "upstream: set it, or enable server" -}}
{{- end -}}
{{- end -}}

{{/* The NATS URL of a fleet. */}}
{{- define "mcp-cancel-proxy.natsURL" -}}
{{- if .Values.fleet.nats.url -}}
{{- .Values.fleet.nats.url -}}
{{- else if .Values.fleet.nats.deploy -}}
{{- printf "nats://%s-nats:4222" (include "mcp-cancel-proxy.fullname" .) -}}
{{- else -}}
{{- fail "fleet.enabled: set fleet.nats.url, or fleet.nats.deploy" -}}
{{- end -}}
{{- end -}}

{{/*
The configuration file: the config value, with the hook store and, for a
fleet, the cluster section filled in where the value leaves them out.
*/}}
{{- define "mcp-cancel-proxy.config" -}}
{{- $cfg := deepCopy (.Values.config | default dict) -}}
{{- if .Values.hooksStore.enabled -}}
{{- $policy := get $cfg "policy" | default dict -}}
{{- $hooks := get $policy "hooks" | default dict -}}
{{- if not (hasKey $hooks "store") -}}
{{- $_ := set $hooks "store" .Values.hooksStore.path -}}
{{- end -}}
{{- $_ := set $policy "hooks" $hooks -}}
{{- $_ := set $cfg "policy" $policy -}}
{{- end -}}
{{- if .Values.fleet.enabled -}}
{{- $cluster := get $cfg "cluster" | default dict -}}
{{- $_ := set $cluster "nats" (include "mcp-cancel-proxy.natsURL" .) -}}
{{- $_ := set $cluster "ack_wait" .Values.fleet.ackWait -}}
{{- $_ := set $cluster "slot_lease" .Values.fleet.slotLease -}}
{{- $_ := set $cfg "cluster" $cluster -}}
{{- if .Values.fleet.auditSubject -}}
{{- $audit := get $cfg "audit" | default dict -}}
{{- $_ := set $audit "nats_subject" .Values.fleet.auditSubject -}}
{{- $_ := set $cfg "audit" $audit -}}
{{- end -}}
{{- end -}}
{{- toYaml $cfg -}}
{{- end -}}

{{/* The admin token's Secret. */}}
{{- define "mcp-cancel-proxy.adminSecret" -}}
{{- .Values.adminToken.existingSecret | default (printf "%s-admin" (include "mcp-cancel-proxy.fullname" .)) -}}
{{- end -}}
