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
{{- $out = append $out (dict "name" (printf "%s-controllers-%s" $fullname .name) "shard" .name) -}}
{{- end -}}
{{- if not $shards -}}
{{- $out = list (dict "name" (printf "%s-controllers" $fullname) "shard" "") -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}
