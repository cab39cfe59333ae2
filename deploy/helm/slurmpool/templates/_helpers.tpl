{{/* Names and labels. */}}
{{- define "slurmpool.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "slurmpool.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else if contains (include "slurmpool.name" .) .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name (include "slurmpool.name" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{- define "slurmpool.selectorLabels" -}}
app.kubernetes.io/name: {{ include "slurmpool.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "slurmpool.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "slurmpool.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: slurmpool
{{- end }}

{{- define "slurmpool.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "slurmpool.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "slurmpool.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{- /* The values with no default: the project publishes no image and controls no registry, so
where the operator's image comes from and which registries slurmd images (root on every node of a
pool) may come from are the installer's choice. Included by deployment.yaml; Helm renders every
template, so no render succeeds without them. */}}
{{- define "slurmpool.requiredValues" -}}
{{- if not .Values.image.repository }}
{{- fail "image.repository is required: the registry and repository you pushed the operator image to (built from deploy/docker/Dockerfile; docs/install.md#the-image). The project publishes no image." }}
{{- end }}
{{- if not .Values.poolPolicy.imagePrefixes }}
{{- fail "poolPolicy.imagePrefixes is required: the registries or repository prefixes slurmd images may come from, e.g. --set poolPolicy.imagePrefixes={registry.example.com/hpc/}. slurmd runs as root on every node a pool selects; no registry is allowed by default (docs/rbac.md#pool-policy)." }}
{{- end }}
{{- end }}
