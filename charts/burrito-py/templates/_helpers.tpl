{{/* The release fullname: the release name itself (shared contract: <release>-controllers, ...). */}}
{{- define "burrito-py.fullname" -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}

{{- define "burrito-py.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Selector labels of a component: (dict "root" $ "component" "controllers"), with "shard" for a controllers shard. */}}
{{- define "burrito-py.selectorLabels" -}}
app.kubernetes.io/name: burrito-py
app.kubernetes.io/instance: {{ .root.Release.Name }}
{{- if .component }}
app.kubernetes.io/component: {{ .component }}
{{- end }}
{{- if .shard }}
burrito-py.io/shard: {{ .shard }}
{{- end }}
{{- end -}}

{{/* All labels of an object: (dict "root" $ "component" "controllers"); component may be empty. */}}
{{- define "burrito-py.labels" -}}
{{ include "burrito-py.selectorLabels" . }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
helm.sh/chart: {{ include "burrito-py.chart" .root }}
{{- with .root.Values.global.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "burrito-py.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- define "burrito-py.datastoreImage" -}}
{{- printf "%s:%s" .Values.datastore.image.repository (default .Chart.AppVersion .Values.datastore.image.tag) -}}
{{- end -}}

{{- define "burrito-py.runnerImage" -}}
{{- printf "%s:%s" .Values.runner.image.repository (default .Chart.AppVersion .Values.runner.image.tag) -}}
{{- end -}}

{{- define "burrito-py.datastoreUrl" -}}
{{- printf "http://%s-datastore.%s.svc.cluster.local:8080" (include "burrito-py.fullname" .) .Release.Namespace -}}
{{- end -}}

{{/* The username of a component's ServiceAccount: (dict "root" $ "component" "server") */}}
{{- define "burrito-py.saUser" -}}
{{- printf "system:serviceaccount:%s:%s-%s" .root.Release.Namespace (include "burrito-py.fullname" .root) .component -}}
{{- end -}}

{{/* The tenants as a JSON list of objects; no tenants: the release namespace alone. */}}
{{- define "burrito-py.tenants" -}}
{{- if .Values.tenants -}}
{{- toJson .Values.tenants -}}
{{- else -}}
{{- toJson (list (dict "namespace" .Release.Namespace "create" false "runnerServiceAccount" (dict "annotations" (dict)))) -}}
{{- end -}}
{{- end -}}

{{/* Namespaces the controllers and server watch, as JSON: the tenants' (tenant mode) or none (= all). */}}
{{- define "burrito-py.watchedNamespaces" -}}
{{- if .Values.clusterMode -}}
[]
{{- else -}}
{{- $names := list -}}
{{- range (include "burrito-py.tenants" . | fromJsonArray) }}{{ $names = append $names .namespace }}{{ end -}}
{{- toJson $names -}}
{{- end -}}
{{- end -}}

{{/* A value as a BURRITO_PY_* variable: lists and maps as JSON, whole numbers without an exponent. */}}
{{- define "burrito-py.envValue" -}}
{{- if or (kindIs "slice" .) (kindIs "map" .) -}}
{{- toJson . -}}
{{- else if and (kindIs "float64" .) (eq . (floor .)) -}}
{{- int64 . -}}
{{- else -}}
{{- toString . -}}
{{- end -}}
{{- end -}}

{{/* A config block as BURRITO_PY_<PREFIX><NAME> entries: (dict "prefix" "DATASTORE_" "config" .Values.datastore.config) */}}
{{- define "burrito-py.configEnv" -}}
{{- $prefix := .prefix -}}
{{- range $key, $value := .config }}
{{- if not (kindIs "invalid" $value) }}
{{ printf "BURRITO_PY_%s%s" $prefix ($key | snakecase | upper) }}: {{ include "burrito-py.envValue" $value | quote }}
{{- end }}
{{- end }}
{{- end -}}

{{/* Restricted Pod Security: the pod and container security contexts every pod gets (not configurable). */}}
{{- define "burrito-py.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "burrito-py.containerSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
allowPrivilegeEscalation: false
privileged: false
readOnlyRootFilesystem: true
capabilities:
  drop:
    - ALL
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* Scheduling of a component's pods: (dict "root" $ "component" "controllers" "values" .Values.controllers) */}}
{{- define "burrito-py.scheduling" -}}
{{- with .root.Values.global.imagePullSecrets }}
imagePullSecrets:
{{- range . }}
  - name: {{ . }}
{{- end }}
{{- end }}
{{- with .values.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with .values.nodeSelector }}
nodeSelector:
{{ toYaml . | indent 2 }}
{{- end }}
{{- with .values.tolerations }}
tolerations:
{{ toYaml . | indent 2 }}
{{- end }}
{{- with .values.affinity }}
affinity:
{{ toYaml . | indent 2 }}
{{- end }}
{{- if .values.topologySpreadConstraints }}
{{- $selector := include "burrito-py.selectorLabels" . | fromYaml }}
topologySpreadConstraints:
{{- range .values.topologySpreadConstraints }}
{{- $constraint := deepCopy . }}
{{- if not (hasKey $constraint "labelSelector") }}
{{- $_ := set $constraint "labelSelector" (dict "matchLabels" $selector) }}
{{- end }}
  - {{ toYaml $constraint | indent 4 | trim }}
{{- end }}
{{- end }}
{{- end -}}

{{/* The projected token for the datastore/server audience. */}}
{{- define "burrito-py.tokenVolume" -}}
- name: burrito-py-token
  projected:
    sources:
      - serviceAccountToken:
          audience: burrito-py
          expirationSeconds: 3600
          path: token
{{- end -}}

{{/* POD_IP from the downward API, for --host $(POD_IP). */}}
{{- define "burrito-py.podIpEnv" -}}
- name: POD_IP
  valueFrom:
    fieldRef:
      fieldPath: status.podIP
{{- end -}}

{{/* A PodDisruptionBudget when there is more than one replica (with one, minAvailable 1 would block drains). */}}
{{- define "burrito-py.pdb" -}}
{{- if gt (int .values.replicas) 1 }}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ include "burrito-py.fullname" .root }}-{{ .component }}{{ if .shard }}-{{ .shard }}{{ end }}
  namespace: {{ .root.Release.Namespace }}
  labels:
    {{- include "burrito-py.labels" . | nindent 4 }}
spec:
  minAvailable: 1
  selector:
    matchLabels:
      {{- include "burrito-py.selectorLabels" . | nindent 6 }}
{{- end }}
{{- end -}}

{{/* The controllers' Deployments as a JSON list of {name, shard}: one per controllers.shards entry
     (<fullname>-controllers-<shard>, each its own leader Lease of that name), else one <fullname>-controllers. */}}
{{- define "burrito-py.controllerShards" -}}
{{- $fullname := include "burrito-py.fullname" . -}}
{{- $shards := .Values.controllers.shards -}}
{{- if and $shards (not .Values.clusterMode) -}}
{{- fail "controllers.shards needs clusterMode: true (a shard watches namespaces by pattern: kopf lists and watches Namespaces cluster-wide)" -}}
{{- end -}}
{{- $out := list -}}
{{- $seen := dict -}}
{{- range $shards -}}
{{- if hasKey $seen .name -}}
{{- fail (printf "controllers.shards: shard name %q is listed more than once" .name) -}}
{{- end -}}
{{- $_ := set $seen .name true -}}
{{- $out = append $out (dict "name" (printf "%s-controllers-%s" $fullname .name) "shard" .name "webhookKeys" (printf "%s-webhook-keys-%s" $fullname .name)) -}}
{{- end -}}
{{- if not $shards -}}
{{- $out = list (dict "name" (printf "%s-controllers" $fullname) "shard" "" "webhookKeys" (printf "%s-webhook-keys" $fullname)) -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}

{{/* The datastore's HTTPS listener (the provider and tool mirrors) is on: "true", else "". */}}
{{- define "burrito-py.datastoreTls" -}}
{{- if or .Values.providerCache.enabled .Values.toolCache.enabled -}}true{{- end -}}
{{- end -}}

{{/* The Secret with the HTTPS listener's tls.crt, tls.key and ca.crt: datastore.tls.existingSecret, else the
     chart's (generated, or cert-manager's) <fullname>-datastore-tls. */}}
{{- define "burrito-py.datastoreTlsSecret" -}}
{{- default (printf "%s-datastore-tls" (include "burrito-py.fullname" .)) .Values.datastore.tls.existingSecret -}}
{{- end -}}

{{/* The datastore Service's DNS names, as a JSON list: what its HTTPS certificate is valid for. */}}
{{- define "burrito-py.datastoreDnsNames" -}}
{{- $service := printf "%s-datastore" (include "burrito-py.fullname" .) -}}
{{- $ns := .Release.Namespace -}}
{{- toJson (list $service (printf "%s.%s" $service $ns) (printf "%s.%s.svc" $service $ns) (printf "%s.%s.svc.cluster.local" $service $ns)) -}}
{{- end -}}

{{- define "burrito-py.datastoreHttpsUrl" -}}
{{- printf "https://%s-datastore.%s.svc.cluster.local:8443" (include "burrito-py.fullname" .) .Release.Namespace -}}
{{- end -}}

{{/* An ISO 8601 duration (as pydantic writes a timedelta: P1DT2H3M4.5S; weeks too) in seconds:
     (dict "name" "providerCache.indexTtl" "value" .Values.providerCache.indexTtl). Years and months, a sign
     or any other form fail naming the value. */}}
{{- define "burrito-py.durationSeconds" -}}
{{- $text := toString .value -}}
{{- $n := `([0-9]+(?:\.[0-9]+)?)` -}}
{{- $re := printf `^P(?:%sW)?(?:%sD)?(?:T(?:%sH)?(?:%sM)?(?:%sS)?)?$` $n $n $n $n $n -}}
{{- if or (not (regexMatch $re $text)) (eq $text "P") (hasSuffix "T" $text) -}}
{{- fail (printf "%s must be an ISO 8601 duration such as PT10M (days, hours, minutes, seconds), not %q" .name $text) -}}
{{- end -}}
{{- $seconds := 0.0 -}}
{{- range $group, $factor := dict "1" 604800 "2" 86400 "3" 3600 "4" 60 "5" 1 -}}
{{- $part := regexReplaceAll $re $text (printf "${%s}" $group) -}}
{{- if $part }}{{ $seconds = addf $seconds (mulf (float64 $part) $factor) }}{{ end -}}
{{- end -}}
{{- include "burrito-py.envValue" $seconds -}}
{{- end -}}

{{/* Runner pods of the tenant namespaces (of any namespace in cluster mode), as NetworkPolicyPeers. */}}
{{- /* Runner pods: only the tenant namespaces have runners, in cluster mode too (the controllers may create pods
nowhere else). */ -}}
{{- define "burrito-py.runnerPeers" -}}
{{- range (include "burrito-py.tenants" . | fromJsonArray) }}
- namespaceSelector:
    matchLabels:
      kubernetes.io/metadata.name: {{ .namespace }}
  podSelector:
    matchLabels:
      burrito-py.io/component: runner
{{- end }}
{{- end -}}

{{- /* The Secrets the controllers publish webhook keys into (one per controllers Deployment): JSON list. */ -}}
{{- define "burrito-py.webhookKeySecrets" -}}
{{- $names := list -}}
{{- range (include "burrito-py.controllerShards" . | fromJsonArray) }}{{ $names = append $names .webhookKeys }}{{ end -}}
{{- toJson $names -}}
{{- end -}}
