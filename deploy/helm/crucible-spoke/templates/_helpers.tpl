{{/* Labels of every object the chart runs (the RBAC carries render's labels only). */}}
{{- define "crucible-spoke.labels" -}}
app.kubernetes.io/name: crucible-authn-webhook
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/part-of: crucible
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end }}

{{- define "crucible-spoke.selector" -}}
app.kubernetes.io/name: crucible-authn-webhook
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "crucible-spoke.image" -}}
{{ .Values.webhook.image.repository }}:{{ .Values.webhook.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* The webhook's TokenReview URL as kube-apiserver reaches it. */}}
{{- define "crucible-spoke.webhookURL" -}}
{{- if .Values.apiserverKubeconfig.server -}}
{{ .Values.apiserverKubeconfig.server }}
{{- else -}}
https://crucible-authn-webhook.{{ .Release.Namespace }}.svc:{{ .Values.webhook.port }}/authenticate
{{- end }}
{{- end }}
