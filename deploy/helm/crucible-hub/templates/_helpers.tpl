{{- define "crucible-hub.labels" -}}
app.kubernetes.io/name: crucible-controller
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/part-of: crucible
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end }}

{{- define "crucible-hub.selector" -}}
app.kubernetes.io/name: crucible-controller
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "crucible-hub.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* The spoke work pods go to by default. */}}
{{- define "crucible-hub.defaultCluster" -}}
{{- if .Values.defaultCluster -}}
{{ .Values.defaultCluster }}
{{- else -}}
{{ (first .Values.spokes).name }}
{{- end }}
{{- end }}

{{/* Refusals the schema cannot express. */}}
{{- define "crucible-hub.validate" -}}
{{- if and (gt (int .Values.replicas) 1) (not .Values.store.postgres.enabled) -}}
{{- fail "replicas > 1 needs store.postgres.enabled: SQLite is one replica's database (R-C10)" -}}
{{- end -}}
{{- $names := dict -}}
{{- range .Values.spokes -}}
{{- if hasKey $names .name -}}
{{- fail (printf "spokes: the name %q appears twice" .name) -}}
{{- end -}}
{{- $_ := set $names .name true -}}
{{- end -}}
{{- if and .Values.defaultCluster (not (hasKey $names .Values.defaultCluster)) -}}
{{- fail (printf "defaultCluster %q is not one of spokes" .Values.defaultCluster) -}}
{{- end -}}
{{- /* Without pods.classes the controller's one class is standard. */ -}}
{{- $classes := dict -}}
{{- range .Values.pods.classes | default (list (dict "name" "standard")) -}}
{{- if hasKey $classes .name -}}
{{- fail (printf "pods.classes: the name %q appears twice" .name) -}}
{{- end -}}
{{- $_ := set $classes .name true -}}
{{- end -}}
{{- range .Values.spokes -}}
{{- $spoke := .name -}}
{{- range $class, $_ := .classes -}}
{{- if not (hasKey $classes $class) -}}
{{- fail (printf "spokes %q: classes.%s is not one of pods.classes" $spoke $class) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end }}
