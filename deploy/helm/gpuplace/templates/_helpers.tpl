{{/* Names and labels. */}}
{{- define "gpuplace.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "gpuplace.serviceAccountName" -}}
{{- .Values.serviceAccount.name | default (include "gpuplace.fullname" .) -}}
{{- end -}}

{{- define "gpuplace.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: gpuplace
{{- end -}}

{{/* Selector labels of one component: (dict "root" $ "component" "placement"). */}}
{{- define "gpuplace.selectorLabels" -}}
app.kubernetes.io/name: {{ .root.Chart.Name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "gpuplace.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{/* GPUPLACE_KUBECONFIG of a cluster: where its kubeconfig Secret is mounted, or `in-cluster` for the cluster the
chart runs in (its ServiceAccount token, which kubelet rotates and gpuplace reads again: no kubeconfig around it). */}}
{{- define "gpuplace.kubeconfig" -}}
{{- if .kubeconfigSecret -}}
{{- printf "/etc/gpuplace/clusters/%s/kubeconfig" .name -}}
{{- else -}}
in-cluster
{{- end -}}
{{- end -}}

{{/*
The non-secret settings, GPUPLACE_* name -> value: the ConfigMap's data, and the hook Job's env (a pre-install hook
runs before the release's ConfigMap exists).
*/}}
{{- define "gpuplace.settings" -}}
GPUPLACE_KAFKA_BOOTSTRAP: {{ .Values.kafka.bootstrap | quote }}
GPUPLACE_KAFKA_SECURITY_PROTOCOL: {{ .Values.kafka.securityProtocol | quote }}
GPUPLACE_KAFKA_SASL_MECHANISM: {{ .Values.kafka.sasl.mechanism | quote }}
{{- if hasPrefix "SASL_" .Values.kafka.securityProtocol }}
GPUPLACE_KAFKA_USERNAME: {{ required (printf "kafka.sasl.username: the SASL user of kafka.securityProtocol=%s (or set kafka.securityProtocol)" .Values.kafka.securityProtocol) .Values.kafka.sasl.username | quote }}
{{- else }}
{{- with .Values.kafka.sasl.username }}
GPUPLACE_KAFKA_USERNAME: {{ . | quote }}
{{- end }}
{{- end }}
{{- if .Values.kafka.tls.existingSecret }}
GPUPLACE_KAFKA_CA_FILE: {{ printf "/etc/gpuplace/kafka-tls/%s" .Values.kafka.tls.caKey | quote }}
{{- if .Values.kafka.tls.certKey }}
GPUPLACE_KAFKA_CERT_FILE: {{ printf "/etc/gpuplace/kafka-tls/%s" .Values.kafka.tls.certKey | quote }}
GPUPLACE_KAFKA_KEY_FILE: {{ printf "/etc/gpuplace/kafka-tls/%s" .Values.kafka.tls.keyKey | quote }}
{{- end }}
{{- end }}
GPUPLACE_TOPIC_SUFFIX: {{ .Values.kafka.topicSuffix | quote }}
GPUPLACE_CONSUMER_GROUP_PREFIX: {{ .Values.kafka.consumerGroupPrefix | quote }}
GPUPLACE_POLICY: {{ .Values.settings.policy | quote }}
GPUPLACE_SCHEDULER_NAME: {{ .Values.settings.schedulerName | quote }}
GPUPLACE_NAMESPACE: {{ .Values.settings.namespace | quote }}
GPUPLACE_LATENCY_MARGIN: {{ .Values.settings.latencyMargin | toString | quote }}
GPUPLACE_DEFRAG_ENABLED: {{ .Values.settings.defragEnabled | toString | quote }}
GPUPLACE_DEFRAG_MIN_PRIORITY: {{ .Values.settings.defragMinPriority | toString | quote }}
GPUPLACE_HANDLER_ATTEMPTS: {{ .Values.settings.handlerAttempts | toString | quote }}
GPUPLACE_RECONCILE_INTERVAL_S: {{ .Values.settings.reconcileIntervalSeconds | toString | quote }}
GPUPLACE_MAX_EVENT_BYTES: {{ .Values.settings.maxEventBytes | int64 | toString | quote }}
GPUPLACE_LOG_LEVEL: {{ .Values.settings.logLevel | quote }}
GPUPLACE_HTTP_PORT: {{ .Values.httpPort | toString | quote }}
{{- range $name, $value := .Values.settings.extra }}
{{ printf "GPUPLACE_%s" (upper $name) }}: {{ $value | toString | quote }}
{{- end }}
{{- end -}}

{{/* The secrets, as env entries from the existing Secrets (never in a ConfigMap or the release); each only to the
pods that use it: the database URL to the jobs, placement and the ingest services, not to cluster-watcher or
gpu-agent. */}}
{{- define "gpuplace.databaseEnv" -}}
- name: GPUPLACE_DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ required "database.existingSecret: the Secret holding GPUPLACE_DATABASE_URL" .Values.database.existingSecret }}
      key: {{ .Values.database.existingSecretKey }}
{{- end -}}

{{/* The Kafka password (and, with kafka.sasl.usersPerService, the service's own user): (dict "root" $ "user"
SERVICE); "user" empty (the hook Job) keeps kafka.sasl.username. An env entry wins over the ConfigMap's. */}}
{{- define "gpuplace.kafkaSecretEnv" -}}
{{- $root := .root -}}
{{- if or $root.Values.kafka.sasl.existingSecret (hasPrefix "SASL_" $root.Values.kafka.securityProtocol) }}
{{- $key := $root.Values.kafka.sasl.existingSecretKey -}}
{{- if and $root.Values.kafka.sasl.usersPerService .user }}
{{- $key = .user }}
- name: GPUPLACE_KAFKA_USERNAME
  value: {{ .user | quote }}
{{- end }}
- name: GPUPLACE_KAFKA_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ required (printf "kafka.sasl.existingSecret: the Secret holding the SASL password of kafka.securityProtocol=%s" $root.Values.kafka.securityProtocol) $root.Values.kafka.sasl.existingSecret }}
      key: {{ $key }}
{{- end }}
{{- end -}}

{{/* GPUPLACE_INSTANCE_ID = the pod's name (static consumer-group membership). */}}
{{- define "gpuplace.instanceIdEnv" -}}
{{- if .Values.kafka.staticMembership }}
- name: GPUPLACE_INSTANCE_ID
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
{{- end }}
{{- end -}}

{{- define "gpuplace.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 10001
runAsGroup: 10001
fsGroup: 10001
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "gpuplace.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: ["ALL"]
{{- end -}}

{{- define "gpuplace.probes" -}}
startupProbe:
  httpGet: {path: /healthz, port: http}
  periodSeconds: 2
  failureThreshold: {{ div .Values.probes.startupSeconds 2 | max 1 }}
livenessProbe:
  httpGet: {path: /healthz, port: http}
  periodSeconds: {{ .Values.probes.livenessPeriodSeconds }}
  failureThreshold: {{ .Values.probes.livenessFailureThreshold }}
readinessProbe:
  httpGet: {path: /readyz, port: http}
  periodSeconds: {{ .Values.probes.readinessPeriodSeconds }}
{{- end -}}

{{/* Volumes every gpuplace pod has: a writable /tmp (the root filesystem is read-only) and Kafka's TLS files. */}}
{{- define "gpuplace.commonVolumes" -}}
- name: tmp
  emptyDir: {}
{{- if .Values.kafka.tls.existingSecret }}
- name: kafka-tls
  secret:
    secretName: {{ .Values.kafka.tls.existingSecret }}
{{- end }}
{{- end -}}

{{- define "gpuplace.commonVolumeMounts" -}}
- name: tmp
  mountPath: /tmp
{{- if .Values.kafka.tls.existingSecret }}
- name: kafka-tls
  mountPath: /etc/gpuplace/kafka-tls
  readOnly: true
{{- end }}
{{- end -}}

{{/* A remote cluster's kubeconfig volume, its Secret (none for the cluster the chart runs in: in-cluster). */}}
{{- define "gpuplace.kubeconfigVolume" -}}
{{- if .cluster.kubeconfigSecret }}
- name: {{ printf "kubeconfig-%s" (.cluster.name | replace "." "-") }}
  secret:
    secretName: {{ .cluster.kubeconfigSecret }}
    items: [{key: kubeconfig, path: kubeconfig}]
{{- end }}
{{- end -}}

{{- define "gpuplace.kubeconfigMount" -}}
{{- if .cluster.kubeconfigSecret }}
- name: {{ printf "kubeconfig-%s" (.cluster.name | replace "." "-") }}
  mountPath: {{ printf "/etc/gpuplace/clusters/%s" .cluster.name }}
  readOnly: true
{{- end }}
{{- end -}}

{{- define "gpuplace.podPlacement" -}}
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}
