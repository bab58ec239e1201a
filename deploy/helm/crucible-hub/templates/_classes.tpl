{{/*
Pod classes in the profile's TOML: pods.classes as [[pods.classes]] tables and
a spoke's classes as [clusters.classes.<name>] tables, the values' camelCase
keys in the profile's snake_case. Only keys the values set are written, so
the controller's defaults stay in one place (internal/profile).
*/}}

{{/* A TOML key: bare when it may be, quoted otherwise ("nvidia.com/gpu"). */}}
{{- define "crucible-hub.tomlKey" -}}
{{- if regexMatch "^[A-Za-z0-9_-]+$" . }}{{ . }}{{ else }}{{ . | quote }}{{ end -}}
{{- end }}

{{/* A map of strings (labels, quantities) as a TOML inline table. */}}
{{- define "crucible-hub.tomlStrings" -}}
{{- $items := list -}}
{{- range $k, $v := . -}}
{{- $items = append $items (printf "%s = %s" (include "crucible-hub.tomlKey" $k) ($v | quote)) -}}
{{- end -}}
{ {{ join ", " $items }} }
{{- end }}

{{/* A list of strings as a TOML array. */}}
{{- define "crucible-hub.tomlList" -}}
[{{ range $i, $v := . }}{{ if $i }}, {{ end }}{{ $v | quote }}{{ end }}]
{{- end }}

{{/* Tolerations as a TOML array of inline tables. */}}
{{- define "crucible-hub.tomlTolerations" -}}
{{- $items := list -}}
{{- range $t := . -}}
{{- $kv := list -}}
{{- range $k := list "key" "operator" "value" "effect" -}}
{{- if hasKey $t $k }}{{ $kv = append $kv (printf "%s = %s" $k (get $t $k | quote)) }}{{ end -}}
{{- end -}}
{{- if hasKey $t "tolerationSeconds" }}{{ $kv = append $kv (printf "toleration_seconds = %d" (int64 $t.tolerationSeconds)) }}{{ end -}}
{{- $items = append $items (printf "{ %s }" (join ", " $kv)) -}}
{{- end -}}
[{{ join ", " $items }}]
{{- end }}

{{/* Required node affinity as a TOML array of inline tables. */}}
{{- define "crucible-hub.tomlNodeAffinity" -}}
{{- $items := list -}}
{{- range . -}}
{{- $kv := list (printf "key = %s" (.key | quote)) (printf "operator = %s" (.operator | quote)) -}}
{{- with .values }}{{ $kv = append $kv (printf "values = %s" (include "crucible-hub.tomlList" .)) }}{{ end -}}
{{- $items = append $items (printf "{ %s }" (join ", " $kv)) -}}
{{- end -}}
[{{ join ", " $items }}]
{{- end }}

{{/* A submitter's bounds (allow) as a [pods.classes.allow] table. */}}
{{- define "crucible-hub.classAllow" -}}
[pods.classes.allow]
{{- with .gpus }}
{{- $kv := list -}}
{{- range $k := list "min" "max" -}}
{{- if hasKey $.gpus $k }}{{ $kv = append $kv (printf "%s = %d" $k (int64 (get $.gpus $k))) }}{{ end -}}
{{- end }}
gpus = { {{ join ", " $kv }} }
{{- end }}
{{- with .resources }}
{{- $items := list -}}
{{- range $name, $r := . -}}
{{- $items = append $items (printf "%s = %s" (include "crucible-hub.tomlKey" $name) (include "crucible-hub.tomlStrings" $r)) -}}
{{- end }}
resources = { {{ join ", " $items }} }
{{- end }}
{{- end }}

{{/* One entry of pods.classes as a [[pods.classes]] table. */}}
{{- define "crucible-hub.podClass" -}}
[[pods.classes]]
name = {{ .name | quote }}
{{- with .defaultFor }}
default_for = {{ include "crucible-hub.tomlList" . }}
{{- end }}
{{- with .groups }}
groups = {{ include "crucible-hub.tomlList" . }}
{{- end }}
requests = {{ include "crucible-hub.tomlStrings" .requests }}
{{- with .limits }}
limits = {{ include "crucible-hub.tomlStrings" . }}
{{- end }}
{{- with .gpus }}
gpus = {{ int64 . }}
{{- end }}
{{- with .gpuResource }}
gpu_resource = {{ . | quote }}
{{- end }}
{{- with .tolerations }}
tolerations = {{ include "crucible-hub.tomlTolerations" . }}
{{- end }}
{{- with .nodeSelector }}
node_selector = {{ include "crucible-hub.tomlStrings" . }}
{{- end }}
{{- with .nodeAffinity }}
node_affinity = {{ include "crucible-hub.tomlNodeAffinity" . }}
{{- end }}
{{- with .priorityClass }}
priority_class = {{ . | quote }}
{{- end }}
{{- with .runtimeClass }}
runtime_class = {{ . | quote }}
{{- end }}
{{- with .deadline }}
deadline = {{ . | quote }}
{{- end }}
{{- with .maxDeadline }}
max_deadline = {{ . | quote }}
{{- end }}
{{- with .maxPending }}
max_pending = {{ . | quote }}
{{- end }}
{{- with .spillAfter }}
spill_after = {{ . | quote }}
{{- end }}
{{- with .maxSpills }}
max_spills = {{ int64 . }}
{{- end }}
{{- with .shm }}
shm = {{ . | quote }}
{{- end }}
{{- with .runAsUser }}
run_as_user = {{ int64 . }}
{{- end }}
{{- with .runAsGroup }}
run_as_group = {{ int64 . }}
{{- end }}
{{- with .allow }}
{{ include "crucible-hub.classAllow" . }}
{{- end }}
{{- end }}

{{/*
A spoke's adjustment of one class, from (dict "name" "adjust"), as a
[clusters.classes.<name>] table. Tolerations are written when the key is
set, even empty: an empty list removes the class's tolerations there.
*/}}
{{- define "crucible-hub.classAdjust" -}}
{{- $a := .adjust | default dict -}}
[clusters.classes.{{ include "crucible-hub.tomlKey" .name }}]
{{- if hasKey $a "withhold" }}
withhold = {{ $a.withhold }}
{{- end }}
{{- with $a.gpuResource }}
gpu_resource = {{ . | quote }}
{{- end }}
{{- if hasKey $a "tolerations" }}
tolerations = {{ include "crucible-hub.tomlTolerations" $a.tolerations }}
{{- end }}
{{- with $a.nodeSelector }}
node_selector = {{ include "crucible-hub.tomlStrings" . }}
{{- end }}
{{- with $a.priorityClass }}
priority_class = {{ . | quote }}
{{- end }}
{{- with $a.runtimeClass }}
runtime_class = {{ . | quote }}
{{- end }}
{{- end }}
