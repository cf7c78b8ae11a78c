{{- define "workloadmap.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "workloadmap.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
app.kubernetes.io/name: workloadmap
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* selector labels of one component: (dict "ctx" $ "component" "watchers") */}}
{{- define "workloadmap.selectorLabels" -}}
app.kubernetes.io/name: workloadmap
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "workloadmap.image" -}}
{{ printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) | quote }}
{{- end -}}

{{- define "workloadmap.watchersServiceAccount" -}}
{{- .Values.watchers.serviceAccount.name | default (printf "%s-watchers" (include "workloadmap.fullname" .)) -}}
{{- end -}}

{{/* The settings every component reads from its environment (WORKLOADMAP_<SETTING>). */}}
{{- define "workloadmap.kafkaEnv" -}}
{{- $k := .Values.kafka -}}
- name: WORKLOADMAP_BOOTSTRAP_SERVERS
  value: {{ required "kafka.bootstrapServers is required (the chart runs no broker)" $k.bootstrapServers | quote }}
- name: WORKLOADMAP_CLIENT_ID
  value: {{ $k.clientId | quote }}
- name: WORKLOADMAP_PARTITIONS
  value: {{ $k.partitions | quote }}
- name: WORKLOADMAP_BROKER_WAIT
  value: {{ $k.brokerWait | quote }}
- name: WORKLOADMAP_SECURITY_PROTOCOL
  value: {{ $k.securityProtocol | quote }}
{{- with $k.sasl.mechanism }}
- name: WORKLOADMAP_SASL_MECHANISM
  value: {{ . | quote }}
{{- end }}
{{- with $k.sasl.username }}
- name: WORKLOADMAP_SASL_USERNAME
  value: {{ . | quote }}
{{- end }}
{{- if $k.sasl.passwordSecret.name }}
- name: WORKLOADMAP_SASL_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ $k.sasl.passwordSecret.name | quote }}
      key: {{ $k.sasl.passwordSecret.key | quote }}
{{- end }}
{{- if $k.tls.secretName }}
- name: WORKLOADMAP_SSL_CAFILE
  value: /etc/workloadmap/kafka-tls/{{ $k.tls.caKey }}
{{- if $k.tls.certKey }}
- name: WORKLOADMAP_SSL_CERTFILE
  value: /etc/workloadmap/kafka-tls/{{ $k.tls.certKey }}
- name: WORKLOADMAP_SSL_KEYFILE
  value: /etc/workloadmap/kafka-tls/{{ $k.tls.keyKey }}
{{- end }}
{{- end }}
{{- range $name, $topic := $k.topics }}
- name: WORKLOADMAP_{{ $name | upper }}
  value: {{ $topic | quote }}
{{- end }}
- name: HOME
  value: /tmp
{{- end -}}

{{/* volumes every component mounts: a writable /tmp (the root filesystem is read-only) and the TLS secret */}}
{{- define "workloadmap.volumes" -}}
- name: tmp
  emptyDir: {}
{{- if .Values.kafka.tls.secretName }}
- name: kafka-tls
  secret:
    secretName: {{ .Values.kafka.tls.secretName | quote }}
{{- end }}
{{- end -}}

{{- define "workloadmap.volumeMounts" -}}
- name: tmp
  mountPath: /tmp
{{- if .Values.kafka.tls.secretName }}
- name: kafka-tls
  mountPath: /etc/workloadmap/kafka-tls
  readOnly: true
{{- end }}
{{- end -}}

{{/* pod-level settings shared by every component */}}
{{- define "workloadmap.podSettings" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
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
{{- end -}}

{{/* HTTP probes on /healthz (liveness) and /readyz (readiness) of a named port */}}
{{/*
Probes on a component's HTTP port (.port).  A component serves them once its broker answered, and
waits for it up to kafka.brokerWait seconds at its start (.wait): the startup probe gives it that
long and a minute more before the liveness probe may restart it, so a pod started while the
broker restarts rides it out instead of being restarted in a loop.
*/}}
{{- define "workloadmap.probes" -}}
startupProbe:
  httpGet: {path: /healthz, port: {{ .port }}}
  periodSeconds: 5
  failureThreshold: {{ add 12 (div (ceil .wait | int) 5) }}
livenessProbe:
  httpGet: {path: /healthz, port: {{ .port }}}
  periodSeconds: 10
  failureThreshold: 6
readinessProbe:
  httpGet: {path: /readyz, port: {{ .port }}}
  periodSeconds: 5
  failureThreshold: 3
{{- end -}}
