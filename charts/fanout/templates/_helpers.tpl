{{/*
The prefix of every object's name: fanout for a release named fanout.
*/}}
{{- define "fanout.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 54 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 54 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 54 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
The injector's name: its Deployment, Service, ServiceAccount, webhook
configuration and PKI RBAC (fanout-injector by default).
*/}}
{{- define "fanout.injector" -}}
{{- printf "%s-injector" (include "fanout.fullname" .) -}}
{{- end -}}

{{- define "fanout.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
Labels on every object.
*/}}
{{- define "fanout.labels" -}}
helm.sh/chart: {{ include "fanout.chart" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- if .Chart.AppVersion }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}
{{- end -}}

{{/*
What the injector's pods are selected by.
*/}}
{{- define "fanout.selectorLabels" -}}
app.kubernetes.io/name: fanout-injector
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "fanout.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- define "fanout.tlsSecret" -}}
{{- default (printf "%s-tls" (include "fanout.injector" .)) .Values.pki.files.secretName -}}
{{- end -}}

{{/*
The PKI mode, checked.
*/}}
{{- define "fanout.pkiSelf" -}}
{{- if eq .Values.pki.mode "self" -}}
true
{{- else if ne .Values.pki.mode "files" -}}
{{- fail (printf "pki.mode is %q: use self or files" .Values.pki.mode) -}}
{{- end -}}
{{- end -}}
