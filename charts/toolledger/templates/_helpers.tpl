{{/*
Chart name, truncated to the 63 characters a label value may hold.
*/}}
{{- define "toolledger.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Full name of the release's objects: the release name when it already contains
the chart name, else "<release>-<chart>".
*/}}
{{- define "toolledger.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "toolledger.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Labels on every object of the manager, and on the release's shared ones.
*/}}
{{- define "toolledger.labels" -}}
{{ include "toolledger.selectorLabels" . }}
{{ include "toolledger.commonLabels" . }}
{{- end }}

{{/*
Labels on every object of the MCP gateway: its own component, so that a
selector of the manager's objects (kubectl -l, a ServiceMonitor) never
matches them.
*/}}
{{- define "toolledger.mcpLabels" -}}
{{ include "toolledger.mcpSelectorLabels" . }}
{{ include "toolledger.commonLabels" . }}
{{- end }}

{{/*
Labels on every object of the web console: its own component.
*/}}
{{- define "toolledger.consoleLabels" -}}
{{ include "toolledger.consoleSelectorLabels" . }}
{{ include "toolledger.commonLabels" . }}
{{- end }}

{{/*
Labels every object carries besides its component's.
*/}}
{{- define "toolledger.commonLabels" -}}
helm.sh/chart: {{ include "toolledger.chart" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: toolledger
{{- end }}

{{/*
Labels that select the manager's pods; immutable once installed.
*/}}
{{- define "toolledger.selectorLabels" -}}
app.kubernetes.io/name: {{ include "toolledger.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: controller-manager
{{- end }}

{{/*
Labels that select the MCP gateway's pods: a component of their own, so the
manager's selector never matches them.
*/}}
{{- define "toolledger.mcpSelectorLabels" -}}
app.kubernetes.io/name: {{ include "toolledger.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: mcp-gateway
{{- end }}

{{/*
Labels that select the web console's pods: a component of their own.
*/}}
{{- define "toolledger.consoleSelectorLabels" -}}
app.kubernetes.io/name: {{ include "toolledger.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: console
{{- end }}

{{/*
Name of the manager's ServiceAccount.
*/}}
{{- define "toolledger.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "toolledger.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
Name of the ClusterRole with the generated manager permissions.
*/}}
{{- define "toolledger.managerRoleName" -}}
{{- printf "%s-manager" (include "toolledger.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Name of the Role and RoleBinding for the leader election lease.
*/}}
{{- define "toolledger.leaderElectionName" -}}
{{- printf "%s-leader-election" (include "toolledger.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Name of the ClusterRole, and of its RoleBindings, that let the manager
impersonate a namespace's ServiceAccounts (the kubernetesApply adapter).
*/}}
{{- define "toolledger.impersonatorName" -}}
{{- printf "%s-impersonator" (include "toolledger.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Name of the metrics Service.
*/}}
{{- define "toolledger.metricsServiceName" -}}
{{- printf "%s-metrics" (include "toolledger.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Name of the ClusterRole, and of its ClusterRoleBinding, that let a scraper
read the manager's /metrics when metrics.secure is true.
*/}}
{{- define "toolledger.metricsReaderName" -}}
{{- printf "%s-metrics-reader" (include "toolledger.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Where the Secret of metrics.certSecret is mounted (--metrics-cert-dir).
*/}}
{{- define "toolledger.metricsCertDir" -}}
/var/run/toolledger/metrics-certs
{{- end }}

{{/*
Fails when a monitoring object is enabled while metrics are off: it would
select or alert on an endpoint that does not exist.
*/}}
{{- define "toolledger.requireMetrics" -}}
{{- if not .root.Values.metrics.enabled }}
{{- fail (printf "%s needs metrics.enabled=true" .what) }}
{{- end }}
{{- end }}

{{/*
The archive API's Service, and the name its serving certificate carries.
*/}}
{{- define "toolledger.archiveAPIName" -}}
{{ include "toolledger.fullname" . }}-archive-api
{{- end }}

{{- define "toolledger.archiveAPICertDir" -}}
/var/run/toolledger/archive-api-certs
{{- end }}

{{- define "toolledger.archiveAPICertSecret" -}}
{{ .Values.archive.api.certSecret | default (printf "%s-tls" (include "toolledger.archiveAPIName" .)) }}
{{- end }}

{{- define "toolledger.archiveAPI" -}}
{{- if and .Values.archive.dsnSecret.name .Values.archive.api.enabled }}true{{ end }}
{{- end }}

{{/*
Where the Secret of the notification sink named . is mounted.
*/}}
{{- define "toolledger.notificationSinkDir" -}}
/var/run/toolledger/notification-sinks/{{ . }}
{{- end }}

{{/*
Refuses tracing.endpoint without the collector's peers where a NetworkPolicy
would admit it.
*/}}
{{- define "toolledger.requireCollectorPeers" -}}
{{- if and .Values.tracing.endpoint (not .Values.tracing.networkPolicy.to) }}
{{- fail "tracing.networkPolicy.to must name where the collector is (NetworkPolicy peers), or the NetworkPolicies would open its port to every address" }}
{{- end }}
{{- end }}
