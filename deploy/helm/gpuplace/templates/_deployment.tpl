{{/*
One gpuplace Deployment, its Service (named port http, for the ServiceMonitor) and its PodDisruptionBudget.
(dict "root" $ "name" "placement" "component" "placement" "command" (list ...) "replicas" 2 "resources" {...}
      "clusters" (list of clusters whose kubeconfig it mounts) "env" (list of extra env entries) "kube" bool
      "database" bool: the pod gets GPUPLACE_DATABASE_URL)
"kube": the pod calls the Kubernetes API of its own cluster with the ServiceAccount's token; pods that do not
get no token at all (automountServiceAccountToken: false).
*/}}
{{- define "gpuplace.deployment" -}}
{{- $root := .root -}}
{{- $name := printf "%s-%s" (include "gpuplace.fullname" $root) .name | trunc 63 | trimSuffix "-" -}}
{{- $selector := include "gpuplace.selectorLabels" (dict "root" $root "component" .component) -}}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ $name }}
  labels:
    {{- include "gpuplace.labels" $root | nindent 4 }}
    app.kubernetes.io/component: {{ .component }}
    {{- with .cluster }}
    gpuplace.io/cluster: {{ . }}
    {{- end }}
spec:
  replicas: {{ .replicas }}
  revisionHistoryLimit: 3
  selector:
    matchLabels:
      {{- $selector | nindent 6 }}
      {{- with .cluster }}
      gpuplace.io/cluster: {{ . }}
      {{- end }}
  template:
    metadata:
      labels:
        {{- $selector | nindent 8 }}
        {{- with .cluster }}
        gpuplace.io/cluster: {{ . }}
        {{- end }}
        {{- with $root.Values.podLabels }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      annotations:
        # a changed setting rolls the pods
        checksum/settings: {{ include "gpuplace.settings" $root | sha256sum }}
        {{- with $root.Values.podAnnotations }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
    spec:
      serviceAccountName: {{ include "gpuplace.serviceAccountName" $root }}
      automountServiceAccountToken: {{ .kube }}
      securityContext:
        {{- include "gpuplace.podSecurityContext" $root | nindent 8 }}
      {{- with include "gpuplace.podPlacement" $root }}{{ . | nindent 6 }}{{ end }}
      terminationGracePeriodSeconds: 30
      containers:
        - name: {{ .component }}
          image: {{ include "gpuplace.image" $root }}
          imagePullPolicy: {{ $root.Values.image.pullPolicy }}
          command: {{ toJson .command }}
          ports:
            - name: http
              containerPort: {{ $root.Values.httpPort }}
              protocol: TCP
          envFrom:
            - configMapRef:
                name: {{ printf "%s-settings" (include "gpuplace.fullname" $root) }}
          env:
            {{- if .database }}
            {{- with include "gpuplace.databaseEnv" $root }}{{ . | nindent 12 }}{{ end }}
            {{- end }}
            {{- with include "gpuplace.kafkaSecretEnv" (dict "root" $root "user" .component) }}{{ . | nindent 12 }}{{ end }}
            {{- with .env }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
          {{- include "gpuplace.probes" $root | nindent 10 }}
          resources:
            {{- toYaml .resources | nindent 12 }}
          securityContext:
            {{- include "gpuplace.containerSecurityContext" $root | nindent 12 }}
          volumeMounts:
            {{- include "gpuplace.commonVolumeMounts" $root | nindent 12 }}
            {{- range .clusters }}
            {{- include "gpuplace.kubeconfigMount" (dict "root" $root "cluster" .) | nindent 12 }}
            {{- end }}
      volumes:
        {{- include "gpuplace.commonVolumes" $root | nindent 8 }}
        {{- range .clusters }}
        {{- include "gpuplace.kubeconfigVolume" (dict "root" $root "cluster" .) | nindent 8 }}
        {{- end }}
---
apiVersion: v1
kind: Service
metadata:
  name: {{ $name }}
  labels:
    {{- include "gpuplace.labels" $root | nindent 4 }}
    app.kubernetes.io/component: {{ .component }}
    gpuplace.io/metrics: "true"
spec:
  type: ClusterIP
  selector:
    {{- $selector | nindent 4 }}
    {{- with .cluster }}
    gpuplace.io/cluster: {{ . }}
    {{- end }}
  ports:
    - name: http
      port: {{ $root.Values.httpPort }}
      targetPort: http
      protocol: TCP
{{- if $root.Values.podDisruptionBudget.enabled }}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ $name }}
  labels:
    {{- include "gpuplace.labels" $root | nindent 4 }}
    app.kubernetes.io/component: {{ .component }}
spec:
  maxUnavailable: {{ $root.Values.podDisruptionBudget.maxUnavailable }}
  selector:
    matchLabels:
      {{- $selector | nindent 6 }}
      {{- with .cluster }}
      gpuplace.io/cluster: {{ . }}
      {{- end }}
{{- end }}
{{- end -}}
