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
{{- else if not .Values.spokes -}}
auto
{{- else -}}
{{ (first .Values.spokes).name }}
{{- end }}
{{- end }}

{{/* "true" when a spoke's token comes from the TokenRequest API, else empty. */}}
{{- define "crucible-hub.anyTokenRequest" -}}
{{- if .Values.fleet.clusterProfiles.namespace -}}true{{- end -}}
{{- range .Values.spokes -}}
{{- if eq (.tokenSource | default "file") "request" -}}true{{- break -}}{{- end -}}
{{- end -}}
{{- end }}

{{/* Refusals the schema cannot express. */}}
{{- define "crucible-hub.validate" -}}
{{- if and (gt (int .Values.replicas) 1) (not .Values.store.postgres.enabled) -}}
{{- fail "replicas > 1 needs store.postgres.enabled: SQLite is one replica's database (R-C10)" -}}
{{- end -}}
{{- if and (not .Values.spokes) (not .Values.fleet.clusterProfiles.namespace) -}}
{{- fail "spokes is empty and fleet.clusterProfiles.namespace is not set: the controller would have no spoke" -}}
{{- end -}}
{{- $names := dict -}}
{{- range .Values.spokes -}}
{{- if hasKey $names .name -}}
{{- fail (printf "spokes: the name %q appears twice" .name) -}}
{{- end -}}
{{- $_ := set $names .name true -}}
{{- end -}}
{{- if and .Values.defaultCluster (ne .Values.defaultCluster "auto") (not (hasKey $names .Values.defaultCluster)) -}}
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
{{- include "crucible-hub.validateEdges" . -}}
{{- range .Values.spokes -}}
{{- $spoke := .name -}}
{{- range $class, $_ := .classes -}}
{{- if not (hasKey $classes $class) -}}
{{- fail (printf "spokes %q: classes.%s is not one of pods.classes" $spoke $class) -}}
{{- end -}}
{{- end -}}
{{- if and (eq (.tokenSource | default "file") "request") (gt (int (.tokenExpirationSeconds | default $.Values.spokeTokenExpirationSeconds)) 86400) -}}
{{- fail (printf "spokes %q: tokenSource request takes a token of at most 86400 seconds (profile token_expiration at most 24h)" $spoke) -}}
{{- end -}}
{{- with .runLive -}}
{{- $port := toString (.port | default 7777) -}}
{{- if and .enabled .ports (not (has $port (toStrings .ports))) -}}
{{- fail (printf "spokes %q: runLive.ports %v must include runLive.port %s (profile run_live_ports, run_live_port)" $spoke .ports $port) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end }}

{{/* The class and TLS of both Ingress objects. */}}
{{- define "crucible-hub.ingressSpecHead" -}}
{{- with .Values.ingress.className }}
ingressClassName: {{ . }}
{{- end }}
{{- with .Values.ingress.tlsSecretName }}
tls:
- hosts: [{{ $.Values.ingress.host | quote }}]
  secretName: {{ . }}
{{- end }}
{{- end }}

{{/* The drop-box Ingress's annotations: the shared ones, ingress-nginx's rate limit, then the
drop-box's own over both. */}}
{{- define "crucible-hub.dropBoxAnnotations" -}}
{{- $a := deepCopy (.Values.ingress.annotations | default dict) -}}
{{- with .Values.ingress.rateLimit -}}
{{- if .enabled -}}
{{- $_ := set $a "nginx.ingress.kubernetes.io/limit-rps" (toString .rps) -}}
{{- $_ := set $a "nginx.ingress.kubernetes.io/limit-burst-multiplier" (toString .burstMultiplier) -}}
{{- $_ := set $a "nginx.ingress.kubernetes.io/limit-connections" (toString .connections) -}}
{{- with .allowlist -}}
{{- $_ := set $a "nginx.ingress.kubernetes.io/limit-whitelist" (join "," .) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $a = mergeOverwrite $a (.Values.ingress.dropBoxAnnotations | default dict) -}}
{{- if $a }}{{ toYaml $a }}{{ end -}}
{{- end }}

{{/* Refusals of the edges: the Ingress and the SSO proxy (issue 23). */}}
{{- define "crucible-hub.validateEdges" -}}
{{- if and .Values.ingress.enabled (not .Values.ingest.trustedProxies) (not .Values.ingress.sharedSourceAddress) -}}
{{- fail "ingress.enabled needs ingest.trustedProxies (the ingress controller's pod CIDRs, whose X-Forwarded-For the drop-box then believes): without it every client shares the ingress controller's address in the drop-box's per-source bucket; set ingress.sharedSourceAddress=true to accept that and leave per-client limits to ingress.rateLimit" -}}
{{- end -}}
{{- $ca := .Values.api.proxyClientCA -}}
{{- if and $ca.secretName $ca.configMapName -}}
{{- fail "api.proxyClientCA: set secretName or configMapName, not both" -}}
{{- end -}}
{{- if eq .Values.api.auth "proxy" -}}
{{- if not (or $ca.secretName $ca.configMapName) -}}
{{- fail "api.auth \"proxy\" needs api.proxyClientCA.secretName or api.proxyClientCA.configMapName (the CA of the proxy's client certificate, profile api.proxy_client_ca): an address in api.proxyCIDRs alone is what every pod of the pod CIDR has" -}}
{{- end -}}
{{- if not .Values.api.proxyClientNames -}}
{{- fail "api.auth \"proxy\" needs api.proxyClientNames (the CN or a DNS SAN of the proxy's client certificate, profile api.proxy_client_names): without it any certificate api.proxyClientCA signed is a proxy, and a mesh-wide CA makes every pod one" -}}
{{- end -}}
{{- else if or $ca.secretName $ca.configMapName -}}
{{- fail (printf "api.proxyClientCA is only used with api.auth \"proxy\", not %q" .Values.api.auth) -}}
{{- else if .Values.api.proxyClientNames -}}
{{- fail (printf "api.proxyClientNames is only used with api.auth \"proxy\", not %q" .Values.api.auth) -}}
{{- end -}}
{{- end }}
