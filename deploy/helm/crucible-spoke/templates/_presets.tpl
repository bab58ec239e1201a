{{/*
The RBAC of one extraSubjects entry as {namespaced: {NS: [rules]}, cluster: [rules]}: a preset's, or
its own rules. The presets are internal/render/presets.go's, rule for rule (a test compares the
chart's output with render spoke's).
*/}}
{{- define "crucible-spoke.grants" -}}
{{- if eq (.preset | default "") "multikueue" -}}
{{- if .namespaces }}
namespaced:
{{- range .namespaces }}
  {{ . }}:
{{- include "crucible-spoke.multikueueRules" . | indent 2 }}
{{- end }}
{{- /* Only the cluster-wide list and watch Kueue's watchers need (remoteClient.startWatcher), never of pods. */}}
cluster:
{{- range (include "crucible-spoke.multikueueKinds" . | fromYamlArray) }}
{{- if ne (index . 1) "pods" }}
- apiGroups: [{{ index . 0 | quote }}]
  resources: [{{ index . 1 }}]
  verbs: [list, watch]
{{- end }}
{{- end }}
{{- else }}
cluster:
{{- include "crucible-spoke.multikueueRules" . }}
{{- end }}
{{- else if eq (.preset | default "") "argocd" -}}
{{- /* Argo CD's namespace-scoped cluster credential (argocd cluster add --namespace NS:
ArgoCDManagerNamespacePolicyRules in util/clusterauth/clusterauth.go), in the listed namespaces only. */ -}}
namespaced:
{{- range .namespaces }}
  {{ . }}:
  - apiGroups: ["*"]
    resources: ["*"]
    verbs: ["*"]
{{- end }}
{{- else -}}
{{ toYaml .rules }}
{{- end }}
{{- end }}

{{/*
The kinds of Kueue's documented worker-cluster role for the MultiKueue manager's kubeconfig user:
https://kueue.sigs.k8s.io/docs/tasks/manage/setup_multikueue/ (create-multikueue-kubeconfig.sh).
*/}}
{{- define "crucible-spoke.multikueueKinds" -}}
{{ list (list "batch" "jobs") (list "" "pods") (list "jobset.x-k8s.io" "jobsets") (list "kueue.x-k8s.io" "workloads") (list "kubeflow.org" "tfjobs") (list "kubeflow.org" "paddlejobs") (list "kubeflow.org" "pytorchjobs") (list "kubeflow.org" "xgboostjobs") (list "kubeflow.org" "mpijobs") (list "ray.io" "rayjobs") (list "ray.io" "rayclusters") (list "workload.codeflare.dev" "appwrappers") | toYaml }}
{{- end }}

{{/* The rules of that role, as a YAML list. */}}
{{- define "crucible-spoke.multikueueRules" -}}
{{- range (include "crucible-spoke.multikueueKinds" . | fromYamlArray) }}
- apiGroups: [{{ index . 0 | quote }}]
  resources: [{{ index . 1 }}]
  verbs: [create, delete, get, list, watch]
{{- if eq (index . 1) "workloads" }}
- apiGroups: [{{ index . 0 | quote }}]
  resources: [workloads/status]
  verbs: [get, patch, update]
{{- else if ne (index . 1) "pods" }}
- apiGroups: [{{ index . 0 | quote }}]
  resources: [{{ index . 1 }}/status]
  verbs: [get]
{{- end }}
{{- end }}
{{- end }}
