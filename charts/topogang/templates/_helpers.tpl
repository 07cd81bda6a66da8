{{/* Labels on every object: the ones kustomize sets (manifests/base/kustomization.yaml) plus Helm's. */}}
{{- define "topogang.commonLabels" -}}
app.kubernetes.io/part-of: topogang
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "topogang.labels" -}}
app.kubernetes.io/name: topogang
{{ include "topogang.commonLabels" . }}
{{- end -}}

{{- define "topogang.selectorLabels" -}}
app.kubernetes.io/name: topogang
app.kubernetes.io/component: extender
{{- end -}}

{{- define "topogang.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* gates mode with cert-manager issuing the webhook's certificate */}}
{{- define "topogang.webhookFromCertManager" -}}
{{- if and (eq .Values.mode "gates") (eq .Values.certificates.source "cert-manager") .Values.certificates.webhookFromCertManager -}}true{{- end -}}
{{- end -}}

{{/* The second scheduler's KubeSchedulerConfiguration: the project's
     scheduler-config/second-scheduler/config.yaml with the release's namespace. */}}
{{- define "topogang.secondSchedulerConfig" -}}
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: ""
leaderElection:
  leaderElect: true
  resourceLock: leases
  resourceNamespace: {{ .Release.Namespace }}
  resourceName: topogang-scheduler
profiles:
  - schedulerName: {{ .Values.secondScheduler.schedulerName }}
extenders:
  - urlPrefix: https://topogang.{{ .Release.Namespace }}.svc:8888/topogang
    filterVerb: filter
    bindVerb: bind
    preemptVerb: preempt
    nodeCacheCapable: true
    httpTimeout: 30s
    ignorable: false
    enableHTTPS: true
    tlsConfig:
      certFile: /etc/kubernetes/topogang/client/tls.crt
      keyFile: /etc/kubernetes/topogang/client/tls.key
      caFile: /etc/kubernetes/topogang/client/ca.crt
{{- end -}}
