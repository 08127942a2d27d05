// A module of its own: cert-manager's controller packages bring dependencies (k8s.io/apiserver,
// the etcd client, OpenTelemetry, ...) that must never enter the library's module graph.
// hack/cm-controllers.sh builds it into bin/ (the directory is not part of the library's module).
module github.com/cert-manager/csi-lib/hack/cm-controllers

go 1.26.0

require github.com/cert-manager/cert-manager v1.21.2
